"""The search alone on sweep tables, without the controller: each probe returns the table's time and energy
ratios with Gaussian noise. Seconds, not minutes: for designing the search (docs/bench.md, issue 16), never for
headline figures (those come from `gpoeo-rt bench` and `bench-suite`, which run the whole controller).

    python scripts/search_offline.py --sku tesla-v100 --prior model --counters none --bound 0.05

--prior model: the SKU's leave-one-workload-out fold (or, with --models generic, the generic leave-one-SKU-out
fold), fed the sweep's counters (--counters sweep, trust 1) or none (--counters none, trust 0, what a pre-Hopper
GPU gives); --prior none: no model at all (the physical form alone).
"""

from __future__ import annotations

import argparse
import math
import sys
import zlib
from pathlib import Path

import numpy as np

from gpoeo_rt.bench.harness import fold_bundles, held_out_predictor
from gpoeo_rt.bench.sweeps import read_sweeps_file
from gpoeo_rt.device import SweepWorkload
from gpoeo_rt.features import FEATURE_NAMES
from gpoeo_rt.search.measured import MeasuredSearch
from gpoeo_rt.search.objectives import Objective, pick_config
from gpoeo_rt.search.prior import counter_trust, prior_from_prediction


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", default="data/processed/sweeps.csv")
    parser.add_argument("--sku", required=True)
    parser.add_argument("--bound", type=float, default=0.05)
    parser.add_argument("--prior", choices=["model", "none"], default="model")
    parser.add_argument("--models", choices=["sku", "generic"], default="sku")
    parser.add_argument("--counters", choices=["sweep", "none"], default="none")
    parser.add_argument("--noise-time", type=float, default=0.0015, help="relative noise of a probe's time ratio")
    parser.add_argument("--noise-energy", type=float, default=0.002)
    parser.add_argument("--folds-root", default="data/eval")
    args = parser.parse_args(argv)
    groups = read_sweeps_file(args.sweeps, [args.sku])
    if not groups:
        print(f"error: no rows of SKU {args.sku!r} in {args.sweeps}", file=sys.stderr)
        return 2
    folds = fold_bundles(Path(args.folds_root), args.sku if args.models == "sku" else "generic")
    oracle_saving, saving, over, probes = [], [], 0, []
    for (sku, workload), rows in sorted(groups.items()):
        w = SweepWorkload.from_rows(rows, table="grid", sm_step_mhz=15)
        table = w.clock_table()
        pairs = list(table.pairs())
        sm = np.array([p[0] for p in pairs], dtype=float)
        mem = np.array([p[1] for p in pairs], dtype=float)
        ref = pairs.index((table.default_sm_mhz, table.default_mem_mhz))
        tp = np.array([w.time_power(s, m) for s, m in pairs])
        t, e = tp[:, 0] / tp[ref, 0], tp[:, 0] * tp[:, 1] / (tp[ref, 0] * tp[ref, 1])
        prior = None
        if args.prior == "model":
            predictor = held_out_predictor(folds[workload if args.models == "sku" else sku])
            ref_row = next(r for r in rows if str(r["ref"]).lower() in ("true", "1"))
            counters = {
                n: float(ref_row[n]) if args.counters == "sweep" and ref_row.get(n) not in (None, "") else math.nan
                for n in FEATURE_NAMES
            }
            grid = predictor.predict_grid(counters, sm, mem, float(sm[ref]), float(mem[ref]))
            trust = counter_trust(counters, predictor.manifest.feature_names)
            prior = prior_from_prediction(sm, mem, ref, grid.time_ratio, grid.power_ratio, trust)
        search = MeasuredSearch(sm, mem, ref, Objective.ENERGY, args.bound, prior)
        search.record(ref, 1.0, 1.0)
        rng = np.random.default_rng(zlib.crc32(workload.encode()))
        n = 0
        while (i := search.next_probe()) is not None:
            noisy_t = t[i] * (1 + args.noise_time * rng.standard_normal())
            search.record(i, noisy_t, e[i] * (1 + args.noise_energy * rng.standard_normal()))
            n += 1
        best, oracle = search.best(), pick_config(Objective.ENERGY, t, e, args.bound)
        oracle_saving.append(1 - e[oracle])
        saving.append(1 - e[best])
        over += t[best] - 1 > args.bound
        probes.append(n)
    print(
        f"{args.sku}, prior {args.prior} ({args.models} model, {args.counters} counters), bound {args.bound:.0%}: "
        f"{100 * np.mean(saving) / np.mean(oracle_saving):.1f}% of the oracle's {100 * np.mean(oracle_saving):.2f}%, "
        f"{over} of {len(saving)} over the bound, {np.mean(probes):.1f} probes (max {max(probes)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
