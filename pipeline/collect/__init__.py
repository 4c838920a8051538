"""`gpoeo-collect`: measure a workload suite over a grid of (SM, memory) clock pairs into `data/raw/<sku>/`.

- `rawformat`: the files a collection writes (shared with the ingest parser `sources/gpoeo_collect.py`);
- `store`: the append-only results file (fsync per row, torn last line recovery) and the clock-lock state file;
- `plan`: the clock grid; `workloads`: the built-in PyTorch micro-workloads (listable without torch);
- `runs`: how a workload runs while it is measured (a subprocess with step markers, or the simulated GPU);
- `collector`: the measurement loop (settle, warm-up, repeats; restores clocks on every exit path);
- `cli`: the typer app behind the `gpoeo-collect` console script.
"""
