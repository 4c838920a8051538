"""Model bundles: `models/<sku>/` holds time.onnx, power.onnx and manifest.json.

The manifest is the contract between the pipeline that writes a bundle and the runtime that loads it. A bundle is
accepted only if its schema version is known, every file's sha256 matches, every input the manifest names is one
the runtime can compute (`gpoeo_rt.inputs`), and each ONNX model takes exactly the manifest's feature list. The
pipeline runs the same check on what it wrote, so a bundle that would be refused here is never shipped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1
# The manifest's seal: sha256 over all its other fields (the files' sha256 among them), so any edit of the manifest,
# not only of the model files, is caught. A seal, not a signature: it catches a changed bundle, not a forger who
# recomputes it (who could as well replace the whole installed package).
SEAL_KEY = "manifest_sha256"
MODEL_FILES: dict[str, str] = {"time": "time.onnx", "power": "power.onnx"}


class BundleError(ValueError):
    """A bundle that must not be used; the message names the bundle directory and the problem."""


@dataclass(frozen=True)
class Manifest:
    path: Path
    name: str
    nvml_names: tuple[str, ...]
    feature_names: tuple[str, ...]
    target_transform: str
    reference_sm_clock_mhz: float | None
    reference_mem_clock_mhz: float | None
    clock_table: tuple[tuple[float, float], ...]  # measured (sm_mhz, mem_mhz) pairs; empty for `generic`
    sha256: dict[str, str]
    raw: dict[str, Any]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_seal(raw: dict[str, Any]) -> str:
    """sha256 of the manifest's fields other than the seal, in canonical JSON (sorted keys, no spaces)."""
    body = {k: v for k, v in raw.items() if k != SEAL_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _require(raw: dict[str, Any], key: str, where: Path) -> Any:
    if key not in raw:
        raise BundleError(f"{where}: manifest has no '{key}'")
    return raw[key]


def parse_manifest(bundle_dir: Path) -> Manifest:
    where = bundle_dir / MANIFEST_NAME
    try:
        raw = json.loads(where.read_bytes())
    except FileNotFoundError as exc:
        raise BundleError(f"{where}: no manifest") from exc
    except OSError as exc:
        raise BundleError(f"{where}: cannot read the manifest ({exc.strerror})") from None
    except ValueError as exc:  # not JSON, not UTF-8
        raise BundleError(f"{where}: manifest is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise BundleError(f"{where}: manifest must be a JSON object")
    version = _require(raw, "schema_version", where)
    if version != SCHEMA_VERSION:
        raise BundleError(f"{where}: schema_version {version!r} is not the supported {SCHEMA_VERSION}")
    try:
        reference = _require(raw, "reference_clocks", where) or {}
        return Manifest(
            path=bundle_dir,
            name=_text(_require(raw, "name", where), "name"),
            nvml_names=tuple(_text(n, "nvml_names") for n in _list(_require(raw, "nvml_names", where), "nvml_names")),
            feature_names=tuple(
                _text(n, "feature_names") for n in _list(_require(raw, "feature_names", where), "feature_names")
            ),
            target_transform=_text(_require(raw, "target_transform", where), "target_transform"),
            reference_sm_clock_mhz=reference.get("sm_clock_mhz"),
            reference_mem_clock_mhz=reference.get("mem_clock_mhz"),
            clock_table=tuple(
                (float(sm), float(mem)) for sm, mem in _list(_require(raw, "clock_table", where), "clock_table")
            ),
            sha256={_text(k, "sha256"): _text(v, "sha256") for k, v in _require(raw, "sha256", where).items()},
            raw=raw,
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise BundleError(f"{where}: malformed manifest ({exc})") from None


def _text(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{key}: expected text, got {type(value).__name__}")
    return value


def _list(value: object, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{key}: expected a list, got {type(value).__name__}")
    return value


def _onnx_input_width(model_path: Path) -> int:
    import onnxruntime as ort  # lazy: keeps `import gpoeo_rt` light

    try:
        session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types (InvalidProtobuf, Fail, ...)
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise BundleError(f"{model_path}: not a loadable ONNX model ({detail})") from None
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise BundleError(f"{model_path}: expected one model input, found {len(inputs)}")
    width = inputs[0].shape[-1]
    if not isinstance(width, int):
        raise BundleError(f"{model_path}: model input width is not fixed ({width!r})")
    return width


def verify_bundle(bundle_dir: Path, *, sealed: bool = False) -> Manifest:
    """Parse and check a bundle; raise BundleError naming the directory and the first problem found. A seal, when
    present, must match; `sealed` also requires one (what the daemon and `bundles verify` ask of installed bundles;
    bundles written before seals existed, e.g. older cross-validation folds, load offline without one)."""
    manifest = parse_manifest(bundle_dir)
    seal = manifest.raw.get(SEAL_KEY)
    where = bundle_dir / MANIFEST_NAME
    if seal is None and sealed:
        raise BundleError(f"{where}: manifest is not sealed (no {SEAL_KEY}); rebuild the bundle (dvc repro bundle)")
    if seal is not None and seal != manifest_seal(manifest.raw):
        raise BundleError(f"{where}: manifest was changed after it was sealed ({SEAL_KEY} does not match its fields)")
    if manifest.target_transform not in ("log", "none"):
        raise BundleError(f"{bundle_dir}: unknown target_transform {manifest.target_transform!r}")
    from gpoeo_rt.inputs import UnknownInputError, check_input_names  # lazy: numpy, not needed by `status`

    try:
        check_input_names(manifest.feature_names, str(bundle_dir / MANIFEST_NAME))
    except UnknownInputError as exc:
        raise BundleError(str(exc)) from exc
    for model_name, file_name in MODEL_FILES.items():
        path = bundle_dir / file_name
        if not path.exists():
            raise BundleError(f"{bundle_dir}: missing {file_name}")
        expected = manifest.sha256.get(file_name)
        if expected is None:
            raise BundleError(f"{bundle_dir}: manifest has no sha256 for {file_name}")
        actual = sha256_file(path)
        if actual != expected:
            raise BundleError(f"{bundle_dir}: sha256 of {file_name} is {actual}, manifest says {expected}")
        width = _onnx_input_width(path)
        if width != len(manifest.feature_names):
            raise BundleError(
                f"{bundle_dir}: {model_name} model takes {width} inputs, manifest lists "
                f"{len(manifest.feature_names)} features"
            )
    return manifest
