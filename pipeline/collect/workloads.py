"""Built-in PyTorch training micro-workloads, and a runner that logs each iteration's end (step markers).

Importing this module does not import torch (torch is the optional `collect` extra): the registry, the size
parsing and `--list-workloads` work without it; a builder imports torch when it runs. Each workload trains on
synthetic data forever; the runner appends `time.time()` after every synchronized step to the file named by
`--markers` (the time base of NVML's buffered samples), which is how the collector times iterations.

    python -m gpoeo_pipeline.collect.workloads cnn --size batch=64 --markers /tmp/m.txt [--device cuda]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Step = Callable[[], None]


@dataclass(frozen=True)
class Builtin:
    name: str
    description: str
    sizes: Mapping[str, int]  # defaults; every size is a positive integer
    build: Callable[[Any, Mapping[str, int]], Step]  # (torch device, sizes) -> one training step


def _cnn(device: Any, s: Mapping[str, int]) -> Step:
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch import nn

    w = s["width"]
    blocks: list[nn.Module] = [nn.Conv2d(3, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU()]
    for i in range(s["layers"]):
        c_in, c_out = w * 2 ** min(i, 3), w * 2 ** min(i + 1, 3)
        blocks += [nn.Conv2d(c_in, c_out, 3, stride=2 if i < 3 else 1, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]
    c_last = w * 2 ** min(s["layers"], 3)
    model = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_last, 1000)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(s["batch"], 3, s["image"], s["image"], device=device)
    y = torch.randint(0, 1000, (s["batch"],), device=device)

    def step() -> None:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def _transformer(device: Any, s: Mapping[str, int]) -> Step:
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch import nn

    d, vocab, seq = s["d_model"], s["vocab"], s["seq"]
    layer = nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, batch_first=True, norm_first=True)
    body = nn.TransformerEncoder(layer, s["layers"], enable_nested_tensor=False)
    embed, head = nn.Embedding(vocab, d), nn.Linear(d, vocab)
    model = nn.ModuleList([embed, body, head]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, vocab, (s["batch"], seq), device=device)
    mask = nn.Transformer.generate_square_subsequent_mask(seq, device=device)

    def step() -> None:
        logits = head(body(embed(x), mask=mask, is_causal=True))
        loss = F.cross_entropy(logits.view(-1, vocab), x.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def _mlp(device: Any, s: Mapping[str, int]) -> Step:
    import torch
    from torch import nn

    # Narrow layers over a huge batch: little arithmetic per byte moved, so memory bandwidth bounds it.
    w = s["width"]
    model = nn.Sequential(*[nn.Sequential(nn.Linear(w, w), nn.LayerNorm(w), nn.GELU()) for _ in range(s["layers"])])
    model = model.to(device)
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(s["batch"], w, device=device)

    def step() -> None:
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def _gnn(device: Any, s: Mapping[str, int]) -> Step:
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch import nn

    # A 2-layer GCN in plain torch (mean aggregation by index_add_): sparse, irregular memory traffic.
    n, e, f, h = s["nodes"], s["edges"], s["features"], s["hidden"]
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(0, n, (e,), generator=gen).to(device)
    dst = torch.randint(0, n, (e,), generator=gen).to(device)
    degree = torch.zeros(n, device=device).index_add_(0, dst, torch.ones(e, device=device)).clamp_(min=1).unsqueeze(1)
    x = torch.randn(n, f, device=device)
    y = torch.randint(0, 16, (n,), device=device)
    lin1, lin2 = nn.Linear(f, h).to(device), nn.Linear(h, 16).to(device)
    opt = torch.optim.Adam([*lin1.parameters(), *lin2.parameters()], lr=0.01)

    def propagate(z: Any) -> Any:
        return torch.zeros_like(z).index_add_(0, dst, z[src]) / degree

    def step() -> None:
        hidden = F.relu(propagate(lin1(x)))
        loss = F.cross_entropy(propagate(lin2(hidden)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin(
            "cnn",
            "ResNet-style conv net on synthetic images (compute-bound)",
            {"batch": 128, "width": 64, "layers": 4, "image": 128},
            _cnn,
        ),
        Builtin(
            "transformer",
            "causal transformer language model (mixed compute/memory)",
            {"batch": 16, "seq": 512, "d_model": 768, "layers": 6, "vocab": 32000},
            _transformer,
        ),
        Builtin(
            "mlp", "narrow MLP over a huge batch (memory-bound)", {"batch": 65536, "width": 256, "layers": 8}, _mlp
        ),
        Builtin(
            "gnn",
            "2-layer GCN on a random graph (sparse gathers and scatters)",
            {"nodes": 200000, "edges": 4000000, "features": 128, "hidden": 128},
            _gnn,
        ),
    )
}


def parse_spec(spec: str) -> tuple[str, dict[str, int]]:
    """`name[:key=value,...]` -> (name, sizes with defaults filled in). ValueError names the bad part."""
    name, _, rest = spec.strip().partition(":")
    if name not in BUILTINS:
        raise ValueError(f"unknown workload {name!r} in {spec!r}; built-in workloads: {', '.join(BUILTINS)}")
    sizes = dict(BUILTINS[name].sizes)
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in sizes:
            raise ValueError(f"bad size {item!r} in {spec!r}; {name} takes {', '.join(f'{k}=N' for k in sizes)}")
        try:
            sizes[key] = int(value)
        except ValueError:
            raise ValueError(f"size {key}={value!r} in {spec!r} is not an integer") from None
        if sizes[key] < 1:
            raise ValueError(f"size {key}={value!r} in {spec!r} must be >= 1")
    return name, sizes


def workload_id(name: str, sizes: Mapping[str, int]) -> str:
    """The workload name in the results: `program/size,...` (the text before '/' is the CV group downstream)."""
    return f"{name}/" + ",".join(f"{k}={v}" for k, v in sorted(sizes.items()))


def run(name: str, sizes: Mapping[str, int], markers: str | None, device: str, steps: int | None = None) -> int:
    """Train `name` until killed (or for `steps` steps), logging each synchronized step's end. Returns steps."""
    import torch

    torch.manual_seed(0)
    dev = torch.device(device)
    step = BUILTINS[name].build(dev, sizes)
    sync: Callable[[], None] = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    done = 0
    with open(markers, "a", buffering=1) if markers else open("/dev/null", "w") as log:
        while steps is None or done < steps:
            step()
            sync()  # the step is over when the GPU is done with it, not when it was queued
            log.write(f"{time.time():.6f}\n")
            done += 1
    return done


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=sorted(BUILTINS))
    parser.add_argument("--size", action="append", default=[], help="key=value (repeatable)")
    parser.add_argument(
        "--markers",
        default=os.environ.get("GPOEO_STEP_MARKERS"),  # how the collector passes it (runs.MARKERS_ENV)
        help="append one wall-clock timestamp per finished step to this file (default: $GPOEO_STEP_MARKERS)",
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: never)")
    args = parser.parse_args(argv)
    name, sizes = parse_spec(f"{args.name}:{','.join(args.size)}")
    run(name, sizes, args.markers, args.device, args.steps)


if __name__ == "__main__":
    main()
