"""A GGUF the user already has (`--model PATH.gguf`, `--offline-model PATH`, the `offlineModel` setting), run
in-process on the same llama.cpp runtime as the offline default, by the same backend (backend.py): the same
watchdog, stop rules, per-document KV reuse, speculative next line and telemetry. What differs is read from the
file: its name (`general.name`, the status label), its FIM tokens (fim.py: its own FIM prompt, or the prefix alone
where it has none) and its BOS. Nothing is downloaded or converted.

A model too slow for keystrokes here (measured at load) answers explicit requests and Fill gap, while keystrokes
stay on Gemma 3 270M (routed.py decides; `offlineModelKeystrokes` overrides the measurement).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from infill.backends.offline.backend import LlamaCppBackend, ModelIdentity
from infill.backends.offline.fim import read_fim_tokens
from infill.backends.offline.runtime import LlamaRuntime
from infill.backends.offline.settings import ARSettings
from infill.types import BackendInfo, InfillError, ProgressCallback

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file


def is_gguf_path(model: str | None) -> bool:
    """Whether a `--model` value names a GGUF file (the llama.cpp runtime's) rather than a DiffusionGemma
    checkpoint."""
    return bool(model) and str(model).strip().lower().endswith(".gguf")


def check_gguf_file(path: Path) -> None:
    """A clear InfillError for a path that cannot be a GGUF: missing, a directory, unreadable, not GGUF."""
    if not path.exists():
        raise InfillError(f"offline model: no file at {path}")
    if not path.is_file():
        raise InfillError(f"offline model: {path} is not a file (a GGUF file is wanted)")
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise InfillError(f"offline model: cannot read {path} ({exc})") from exc
    if magic != GGUF_MAGIC:
        raise InfillError(
            f"offline model: {path} is not a GGUF file (llama.cpp runs GGUF; convert the model with llama.cpp's "
            f"convert_hf_to_gguf.py, or use the GGUF you give llama-server)"
        )


def load_user_backend(
    path: str | Path, settings: ARSettings | None = None, progress: ProgressCallback | None = None
) -> LlamaCppBackend:
    """The user's GGUF on llama.cpp, warmed up and measured. Raises InfillError naming the file and why it cannot
    serve (no file, not a GGUF, an architecture this llama.cpp does not know)."""
    path = Path(path).expanduser()
    check_gguf_file(path)
    settings = settings or ARSettings()
    if progress is not None:
        progress(f"loading {path.name} on llama.cpp", None)
    started = time.monotonic()
    runtime = LlamaRuntime(path, settings.runtime_shape(), reload_hint="is it a model this llama.cpp supports?")
    try:
        backend = LlamaCppBackend(runtime, settings, user_identity(runtime, path))
        backend.warm_up()
    except BaseException:
        runtime.close()
        raise
    log.info(
        "loaded %s from %s in %.1f s (%s prompt, a token in %.1f ms)",
        backend.info.label,
        path,
        time.monotonic() - started,
        backend.versions["prompt"],
        (backend.token_s or 0.0) * 1000,
    )
    return backend


def user_identity(runtime: LlamaRuntime, path: Path) -> ModelIdentity:
    """What the file says it is: its name, architecture, quantisation and FIM tokens."""
    name = (runtime.metadata("general.name") or "").strip() or path.stem
    fim = read_fim_tokens(runtime.metadata, runtime.special_token)
    architecture = runtime.metadata("general.architecture") or "unknown"
    file_type = runtime.metadata("general.file_type") or "unknown"
    how = "fill-in-the-middle" if fim is not None else "prefix only: no FIM tokens"
    info = BackendInfo(
        name=f"gguf:{name}",
        kind="autoregressive",
        model=str(path),
        device="cpu",
        dtype="gguf",
        is_fallback=False,
        label=f"{name} ({how})",
    )
    versions = {
        "model": name,
        "gguf_path": str(path),
        "gguf_bytes": path.stat().st_size,
        "architecture": architecture,
        "file_type": file_type,
        "fim_source": fim.source if fim is not None else None,
    }
    return ModelIdentity(info, versions, fim)
