#!/usr/bin/env python3
"""A plain PyTorch training loop that tells gpoeo-rt when each step ends: one import, one call.

Run it beside `gpoeo-rt start` (or `--advise`); `gpoeo-rt status` then shows timing "markers" for its GPU. Without
a daemon the calls cost a fraction of a microsecond and do nothing. Needs torch (pip install 'gpoeo[collect]').
Usage: train_with_markers.py [SECONDS]
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn

from gpoeo_rt.client import mark_step, step


def main(seconds: float = 30.0) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(256, 1024, device=device)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark_step()  # no synchronize needed: over a window the host's step rate is the GPU's
    # The same as a context manager (or decorator: @step()); a step that raises is not marked.
    with step():
        model(x).sum().backward()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 30.0)
