"""PyTorch Lightning: `Trainer(callbacks=[GpoeoStepMarker()])` marks every training batch for gpoeo-rt.

Importable without Lightning: the class exists only when `lightning` (or `pytorch_lightning`) is installed;
otherwise using it raises an ImportError that says so. `make_callback(base)` builds it on any Callback base.
Each rank marks its own GPU (Lightning sets the current CUDA device per rank; pass `gpu=` to override).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from gpoeo_rt.client.markers import GPU, MarkerClient


def make_callback(base: type) -> type:
    """The callback class on a given Lightning `Callback` base class."""

    class GpoeoStepMarker(base):  # type: ignore[valid-type,misc]
        """Marks a step at the end of every training batch (one optimizer step per batch unless you accumulate
        gradients; either way every marked step is one unit of work, which is all gpoeo-rt needs)."""

        def __init__(
            self, gpu: GPU | Iterable[GPU] | None = None, run_dir: str | os.PathLike[str] | None = None
        ) -> None:
            super().__init__()
            self.marker = MarkerClient(run_dir, gpu=gpu)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.marker.mark()

    return GpoeoStepMarker


def _lightning_callback() -> type:
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:
        from pytorch_lightning.callbacks import Callback
    return Callback  # type: ignore[no-any-return]


try:
    GpoeoStepMarker = make_callback(_lightning_callback())
except ImportError:

    def __getattr__(name: str) -> Any:
        if name == "GpoeoStepMarker":
            raise ImportError("GpoeoStepMarker needs PyTorch Lightning: pip install lightning")
        raise AttributeError(name)
