"""Choosing the bundle for a GPU: the one whose manifest names the GPU, else `generic`, and say why."""

from __future__ import annotations

import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from gpoeo_rt.prediction.bundle import BundleError, Manifest, parse_manifest, verify_bundle

GENERIC = "generic"
BUNDLES_ENV = "GPOEO_BUNDLES"


@dataclass(frozen=True)
class BundleChoice:
    manifest: Manifest
    reason: str


def _install_data_roots() -> list[Path]:
    """Where an install puts the wheel's data files (`share/gpoeo/models`): this environment's prefix and the
    user scheme (`pip install --user`: ~/.local) and Debian's /usr/local (pip on a system Python)."""
    roots = [sys.prefix, sysconfig.get_path("data")]
    for scheme in (f"{os.name}_user", "posix_local"):
        if scheme in sysconfig.get_scheme_names():
            roots.append(sysconfig.get_path("data", scheme))
    return [Path(r) for r in dict.fromkeys(roots)]


def default_bundle_dirs() -> list[Path]:
    """Where bundles are looked for, first match wins: $GPOEO_BUNDLES, then the repository's `models/` (source or
    editable installs), then `<data root>/share/gpoeo/models` for each root an install may use (wheel installs into
    a venv, `--user` or a system Python)."""
    dirs = []
    if os.environ.get(BUNDLES_ENV):
        dirs.append(Path(os.environ[BUNDLES_ENV]))
    dirs.append(Path(__file__).resolve().parents[3] / "models")
    dirs.extend(root / "share" / "gpoeo" / "models" for root in _install_data_roots())
    return dirs


def _matches(manifest: Manifest, gpu_name: str) -> bool:
    return any(gpu_name.startswith(prefix) for prefix in manifest.nvml_names)


def select_bundle(bundle_root: Path, gpu_name: str) -> BundleChoice:
    """Pick and verify the bundle for `gpu_name` under `bundle_root`. Only the chosen bundle is verified: a broken
    bundle of another SKU does not concern this GPU. A corrupt matching bundle is an error (it is never silently
    replaced by another), and so is a manifest that cannot be read at all when no other bundle matches (it may be
    this GPU's); with no match, the generic bundle is used and the reason says so."""
    if not bundle_root.is_dir():
        raise BundleError(f"{bundle_root}: bundle directory not found")
    candidates = sorted(p for p in bundle_root.iterdir() if (p / "manifest.json").exists() and p.name != GENERIC)
    unreadable: list[str] = []
    for path in candidates:
        try:
            manifest = parse_manifest(path)
        except BundleError as exc:
            unreadable.append(str(exc))
            continue
        if _matches(manifest, gpu_name):
            manifest = verify_bundle(path, sealed=True)
            return BundleChoice(manifest, f"bundle '{manifest.name}' lists NVML name prefix matching {gpu_name!r}")
    if unreadable:
        raise BundleError(f"no readable bundle matches {gpu_name!r} and one that cannot be read may: {unreadable[0]}")
    generic = bundle_root / GENERIC
    if not (generic / "manifest.json").exists():
        raise BundleError(f"{bundle_root}: no bundle matches {gpu_name!r} and there is no generic bundle")
    manifest = verify_bundle(generic, sealed=True)
    known = ", ".join(p.name for p in candidates) or "none"
    return BundleChoice(manifest, f"the cross-GPU model: no bundle lists {gpu_name!r} (SKU bundles: {known})")
