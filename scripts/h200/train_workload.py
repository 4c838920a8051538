#!/usr/bin/env python3
"""Real PyTorch training loops on synthetic data, logging every iteration end (ground truth for detection).

Adapted from the shared h200-probe workloads. Writes `t_s,phase,iteration` with wall-clock t_s (time.time()), the
same time base as NVML's buffered samples and `gpoeo-rt trace record`. It never touches GPU settings.

Usage: train_workload.py SPEC OUT_CSV SECONDS [MARKERS]
SPEC: kind[:batch[:stall]] joined by '+' for a phase change halfway, e.g. resnet:512, gpt:16+mlp:65536.
kind: resnet, gpt, gptvar (a transformer whose sequence length varies per step, 256-1024 in steps of 128), mlp.
stall (a host-side wait after each step, as a data loader makes): MS (fixed), LO-HI (uniform in [LO, HI] ms) or
pMEAN (heavy-tailed: Pareto, alpha 2.5, mean MEAN ms, at most 12 x MEAN). Random draws are seeded: reruns repeat.
MARKERS: off (default), on (gpoeo_rt.client.mark_step() after every step), or alternate:BLOCK_S (blocks of BLOCK_S
seconds without, then with markers, in turn: an in-process interleaved overhead measurement). The `marked` column
says whether a step sent a marker.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

DEVICE = "cuda"


def resnet(batch: int) -> Callable[[], None]:
    import torchvision

    model = torchvision.models.resnet50().to(DEVICE).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device=DEVICE).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=DEVICE)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def gpt(batch: int, d: int = 1024, layers: int = 12, seq: int = 1024) -> Callable[[], None]:
    layer = nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True, norm_first=True)
    model = nn.Sequential(nn.Embedding(32000, d), nn.TransformerEncoder(layer, layers), nn.Linear(d, 32000)).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 32000, (batch, seq), device=DEVICE)
    mask = nn.Transformer.generate_square_subsequent_mask(seq, device=DEVICE)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = model[1](model[0](x), mask=mask, is_causal=True)
            logits = model[2](h)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), x.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def gpt_variable_length(batch: int, d: int = 1024, layers: int = 12) -> Callable[[], None]:
    """The transformer of gpt() with a sequence length drawn per step: iterations jitter with the data."""
    layer = nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True, norm_first=True)
    model = nn.Sequential(nn.Embedding(32000, d), nn.TransformerEncoder(layer, layers), nn.Linear(d, 32000)).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = list(range(256, 1025, 128))
    inputs = {n: torch.randint(0, 32000, (batch, n), device=DEVICE) for n in lengths}
    masks = {n: nn.Transformer.generate_square_subsequent_mask(n, device=DEVICE) for n in lengths}
    draw = random.Random(1)

    def step() -> None:
        n = draw.choice(lengths)
        x = inputs[n]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = model[1](model[0](x), mask=masks[n], is_causal=True)
            logits = model[2](h)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), x.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def stall_drawer(field: str) -> Callable[[], float]:
    """Seconds of host stall per step for the SPEC's stall field (see the module docstring)."""
    draw = random.Random(0)
    if field.startswith("p"):
        mean_s = float(field[1:]) / 1000
        alpha = 2.5
        scale = mean_s * (alpha - 1) / alpha  # Pareto minimum giving that mean
        return lambda: min(scale * draw.paretovariate(alpha), 12 * mean_s)
    if "-" in field:
        lo, hi = (float(v) / 1000 for v in field.split("-", 1))
        return lambda: draw.uniform(lo, hi)
    fixed_s = float(field) / 1000
    return lambda: fixed_s


def mlp(batch: int) -> Callable[[], None]:
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU()) for _ in range(8)])
    model = model.to(DEVICE)
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(batch, 256, device=DEVICE)

    def step() -> None:
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


BUILDERS: dict[str, Callable[[int], Callable[[], None]]] = {
    "resnet": resnet,
    "gpt": gpt,
    "gptvar": gpt_variable_length,
    "mlp": mlp,
}
DEFAULT_BATCH = {"resnet": 128, "gpt": 16, "gptvar": 32, "mlp": 65536}


def marking(mode: str) -> Callable[[float], bool]:
    """Whether a step ending at monotonic time t marks, for the MARKERS argument."""
    if mode == "off":
        return lambda t: False
    if mode == "on":
        return lambda t: True
    if mode.startswith("alternate:"):
        block_s = float(mode.split(":", 1)[1])
        return lambda t: int(t / block_s) % 2 == 1
    raise SystemExit(f"MARKERS {mode!r}: expected off, on or alternate:BLOCK_S")


def main() -> None:
    spec, out, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    marks = marking(sys.argv[4] if len(sys.argv) > 4 else "off")
    from gpoeo_rt.client import mark_step  # the runtime's client: no numpy, nothing else

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    phases = spec.split("+")
    with open(out, "w") as log:
        log.write("t_s,phase,iteration,marked\n")
        for phase, part in enumerate(phases):
            fields = part.split(":")
            kind = fields[0]
            batch = int(fields[1]) if len(fields) > 1 else DEFAULT_BATCH[kind]
            stall_s = stall_drawer(fields[2]) if len(fields) > 2 else None
            step = BUILDERS[kind](batch)
            for _ in range(40 if kind == "gptvar" else 5):  # warm-up: cudnn autotuning, allocator growth
                step()
            torch.cuda.synchronize()
            end = time.monotonic() + seconds / len(phases)
            iteration = 0
            while time.monotonic() < end:
                step()
                torch.cuda.synchronize()
                if stall_s is not None:
                    time.sleep(stall_s())  # a host-side stall (data loading) inside the iteration
                iteration += 1
                t_end = time.time()
                marked = marks(time.monotonic())
                if marked:
                    mark_step()
                log.write(f"{t_end:.6f},{phase},{iteration},{int(marked)}\n")
    print(f"{spec}: done", flush=True)


if __name__ == "__main__":
    main()
