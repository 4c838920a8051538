"""The clock grid of a sweep: supported (SM, memory) pairs, subsampled, with the reference config first."""

from __future__ import annotations

from collections.abc import Sequence

from gpoeo_rt.device import ClockTable


def reference_config(table: ClockTable) -> tuple[int, int]:
    """The reference config: the GPU's default clocks (what a job runs at when nobody sets clocks)."""
    return table.default_sm_mhz, table.default_mem_mhz


def clock_grid(table: ClockTable, sm_stride: int, mem_clocks: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """(sm_mhz, mem_mhz) pairs to measure: every `sm_stride`-th supported SM clock counted down from the highest
    (so the top clock is always in), for each memory clock in `mem_clocks` (default: all supported), plus the
    reference. The reference comes first, so a collection interrupted early still has every workload's ref row;
    then memory clocks descending, SM clocks descending."""
    if sm_stride < 1:
        raise ValueError(f"sm_stride must be >= 1, got {sm_stride}")
    mems = list(table.mem_clocks_mhz) if mem_clocks is None else [int(m) for m in mem_clocks]
    unknown = [m for m in mems if m not in table.mem_clocks_mhz]
    if unknown:
        raise ValueError(f"memory clock(s) {unknown} MHz not supported; supported: {list(table.mem_clocks_mhz)}")
    reference = reference_config(table)
    grid = [reference]
    for mem in sorted(set(mems), reverse=True):
        sms = sorted(table.sm_clocks_mhz(mem), reverse=True)
        grid.extend((sm, mem) for sm in sms[::sm_stride] if (sm, mem) != reference)
    return grid
