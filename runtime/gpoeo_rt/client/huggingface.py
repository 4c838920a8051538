"""Hugging Face Transformers: `Trainer(..., callbacks=[GpoeoStepMarker()])` marks every optimizer step for gpoeo-rt.

Importable without transformers: the class exists only when `transformers` is installed; otherwise using it raises
an ImportError that says so. `make_callback(base)` builds it on any TrainerCallback base.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from gpoeo_rt.client.markers import GPU, MarkerClient


def make_callback(base: type) -> type:
    """The callback class on a given `TrainerCallback` base class."""

    class GpoeoStepMarker(base):  # type: ignore[valid-type,misc]
        """Marks a step at each `on_step_end` (after the optimizer step, gradient accumulation included)."""

        def __init__(
            self, gpu: GPU | Iterable[GPU] | None = None, run_dir: str | os.PathLike[str] | None = None
        ) -> None:
            super().__init__()
            self.marker = MarkerClient(run_dir, gpu=gpu)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.marker.mark()  # returns None: the trainer's control flow is untouched

    return GpoeoStepMarker


def _trainer_callback() -> type:
    from transformers import TrainerCallback

    return TrainerCallback  # type: ignore[no-any-return]


try:
    GpoeoStepMarker = make_callback(_trainer_callback())
except ImportError:

    def __getattr__(name: str) -> Any:
        if name == "GpoeoStepMarker":
            raise ImportError("GpoeoStepMarker needs Hugging Face Transformers: pip install transformers")
        raise AttributeError(name)
