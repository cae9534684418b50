"""llama.cpp, in-process, through llama-cpp-python's C bindings: one model, one context with a KV sequence per
document, a batch, the logits. Nothing here knows about gaps or prompts (infill/backends/offline/backend.py does).

The C API is used directly rather than llama-cpp-python's `Llama` class: that class drives a single sequence and
keeps a logits row per batch position (262,144 floats each), while the offline default wants a sequence per open
document (switching files then re-encodes nothing) and only the logits of the rows it decodes.
"""

from __future__ import annotations

import ctypes
import logging
from collections import deque
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from infill.types import InfillError

log = logging.getLogger(__name__)

# ggml_log_level WARN (notes such as "using full-size SWA cache") and ERROR; the rest is not logged
_GGML_LEVELS = {3: logging.INFO, 4: logging.ERROR}


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise InfillError(
            "the offline default runs on llama.cpp, which is not installed: run `bash scripts/setup.sh` "
            "(pip builds llama-cpp-python from source once; it needs a C/C++ compiler and CMake)"
        ) from exc
    return llama_cpp


@dataclass(frozen=True)
class RuntimeShape:
    """How the context is laid out: `sequences` documents kept at once, each up to `sequence_tokens` tokens."""

    sequences: int
    sequence_tokens: int
    batch_tokens: int  # most tokens one decode call takes (a prefill chunk, computed in one graph run)
    max_outputs: int  # most logits rows one decode call asks for (one token plus its drafts)
    threads: int


class LlamaRuntime:
    """A loaded GGUF and its context. Single-threaded: the model worker (infill/worker.py) is its only caller."""

    def __init__(self, path: Path, shape: RuntimeShape, reload_hint: str = "delete it to assemble it again") -> None:
        lib = _import_llama_cpp()
        self._lib = lib
        self.shape = shape
        _route_logs(lib)
        lib.llama_backend_init()
        model_params = lib.llama_model_default_params()
        model_params.n_gpu_layers = 0
        if "AMX_INT8" in cpu_features(lib.llama_print_system_info().decode(errors="replace")):
            # llama.cpp 0.3.36's AMX matmul crashes on this model (seen on a Xeon with AMX); scripts/setup.sh
            # builds without AMX. A build that has it runs without llama.cpp's extra weight layouts (slower).
            log.warning(
                "this llama.cpp build uses AMX, which crashes on Gemma 3; running without its extra weight "
                "layouts (slower): reinstall llama-cpp-python with scripts/setup.sh to build it without AMX"
            )
            model_params.use_extra_bufts = False
        _RECENT_ERRORS.clear()
        self._model = lib.llama_model_load_from_file(str(path).encode(), model_params)
        if not self._model:
            why = f" ({'; '.join(_RECENT_ERRORS)})" if _RECENT_ERRORS else ""
            raise InfillError(f"llama.cpp could not load {path}{why}; {reload_hint}")
        params = lib.llama_context_default_params()
        params.n_ctx = shape.sequences * shape.sequence_tokens
        params.n_seq_max = shape.sequences
        params.n_batch = shape.batch_tokens
        params.n_ubatch = shape.batch_tokens
        params.n_outputs_max = shape.max_outputs
        params.n_threads = params.n_threads_batch = shape.threads
        params.swa_full = True  # sliding-window layers keep every position, so a sequence can be cut back anywhere
        params.kv_unified = False  # each document attends over its own cells only
        params.no_perf = True
        self._ctx = lib.llama_init_from_model(self._model, params)
        if not self._ctx:
            lib.llama_model_free(self._model)
            raise InfillError("llama.cpp could not create a context for the offline model (out of memory?)")
        self._memory = lib.llama_get_memory(self._ctx)
        self._vocab = lib.llama_model_get_vocab(self._model)
        self.n_vocab = lib.llama_vocab_n_tokens(self._vocab)
        self.bos = lib.llama_vocab_bos(self._vocab)
        self.adds_bos = bool(lib.llama_vocab_get_add_bos(self._vocab)) and self.bos >= 0
        self.end_tokens: frozenset[int] = frozenset()  # a model's own end-of-fill tokens (its FIM pad, ...)
        self._batch = lib.llama_batch_init(shape.batch_tokens, 0, 1)
        self._pieces: dict[int, bytes] = {}
        self._closed = False

    # --- text -------------------------------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """`tokenize` in the tokenizer shape infill/cache/tokens.py reads (no special tokens are ever added)."""
        return self.tokenize(text)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text`, no BOS, special-token text read as plain text."""
        data = text.encode("utf-8")
        room = len(data) + 8
        out = (self._lib.llama_token * room)()
        n = self._lib.llama_tokenize(self._vocab, data, len(data), out, room, False, False)
        if n < 0:  # cannot happen with a token per byte of room, but the API allows it
            out = (self._lib.llama_token * -n)()
            n = self._lib.llama_tokenize(self._vocab, data, len(data), out, -n, False, False)
        return list(out[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for in output text (b"" for control tokens)."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = self._lib.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = self._lib.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
            cached = self._pieces[token] = buf.raw[:n]
        return cached

    def detokenize(self, tokens: list[int]) -> str:
        """The text of `tokens`; an incomplete UTF-8 sequence at the end (a character split over byte tokens) is
        left out until the rest of it arrives."""
        data = b"".join(self.piece(t) for t in tokens)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.end == len(data) or exc.reason == "unexpected end of data":
                return data[: exc.start].decode("utf-8", "replace")
            return data.decode("utf-8", "replace")

    def vocabulary(self) -> list[str]:
        """Each token's text as the model writes it ("" for control, unused and byte-fallback tokens)."""
        lib, skip = (
            self._lib,
            (
                lib_attr(self._lib, "CONTROL")
                | lib_attr(self._lib, "UNUSED")
                | lib_attr(self._lib, "BYTE")
                | lib_attr(self._lib, "UNKNOWN")
            ),
        )
        texts = []
        for token in range(self.n_vocab):
            if lib.llama_vocab_get_attr(self._vocab, token) & skip:
                texts.append("")
            else:
                texts.append(self.piece(token).decode("utf-8", "replace"))
        return texts

    def is_end(self, token: int) -> bool:
        """End of generation (EOS, end of turn), one of `end_tokens` or any other control token: nothing a fill
        may contain."""
        return bool(
            token in self.end_tokens
            or self._lib.llama_vocab_is_eog(self._vocab, token)
            or self._lib.llama_vocab_is_control(self._vocab, token)
        )

    def special_token(self, text: str) -> int | None:
        """The id of the special (control or user-defined) token whose text is `text`, or None."""
        data = text.encode("utf-8")
        out = (self._lib.llama_token * 8)()
        n = self._lib.llama_tokenize(self._vocab, data, len(data), out, 8, False, True)
        if n != 1:
            return None
        special = lib_attr(self._lib, "CONTROL") | lib_attr(self._lib, "USER_DEFINED")
        return int(out[0]) if self._lib.llama_vocab_get_attr(self._vocab, out[0]) & special else None

    def metadata(self, key: str) -> str | None:
        """The text of the GGUF metadata value `key` (numbers as their digits), or None when the file has none."""
        size = 256
        buf = ctypes.create_string_buffer(size)
        n = self._lib.llama_model_meta_val_str(self._model, key.encode(), buf, size)
        if n < 0:
            return None
        if n >= size:
            buf = ctypes.create_string_buffer(n + 1)
            self._lib.llama_model_meta_val_str(self._model, key.encode(), buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    # --- sequences --------------------------------------------------------------------------------------------

    def held(self, seq: int) -> int:
        """Tokens the sequence holds (its positions are 0..held-1)."""
        return int(self._lib.llama_memory_seq_pos_max(self._memory, seq)) + 1

    def cut(self, seq: int, keep: int) -> None:
        """Forget the sequence's positions from `keep` on."""
        if not self._lib.llama_memory_seq_rm(self._memory, seq, keep, -1):
            self._lib.llama_memory_seq_rm(self._memory, seq, -1, -1)  # a whole sequence always goes
            raise InfillError(f"llama.cpp could not cut sequence {seq} back to {keep} tokens")

    def decode(self, seq: int, tokens: list[int], outputs: int = 1) -> np.ndarray | None:
        """Append `tokens` to sequence `seq`; the logits of the last `outputs` of them, one row each (float32,
        valid until the next call), or None for none."""
        shape = self.shape
        if not 0 < len(tokens) <= shape.batch_tokens or outputs > min(len(tokens), shape.max_outputs):
            raise InfillError(f"bad decode call: {len(tokens)} tokens, {outputs} outputs")
        start = self.held(seq)
        if start + len(tokens) > shape.sequence_tokens:
            raise InfillError(f"the sequence would exceed {shape.sequence_tokens} tokens")
        batch, first_output = self._batch, len(tokens) - outputs
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = i >= first_output
        batch.n_tokens = len(tokens)
        status = self._lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise InfillError(f"llama.cpp could not decode (status {status})")
        if not outputs:
            return None
        logits = self._lib.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(logits, shape=(outputs, self.n_vocab))

    # --- the build --------------------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The runtime and its build, for results' versions and logs."""
        lib = self._lib
        base = _ggml_base(Path(lib.__file__).parent / "lib")
        commit = base.ggml_commit().decode() if base is not None else "unknown"
        version = base.ggml_version().decode() if base is not None else "unknown"
        features = lib.llama_print_system_info().decode(errors="replace")
        return {
            "runtime": "llama.cpp",
            "llama_cpp_python": metadata.version("llama-cpp-python"),
            "ggml_version": version,
            "ggml_commit": commit,
            "cpu_features": cpu_features(features),
            "threads": self.shape.threads,
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._lib.llama_batch_free(self._batch)
        self._lib.llama_free(self._ctx)
        self._lib.llama_model_free(self._model)


def lib_attr(lib: Any, name: str) -> int:
    return int(getattr(lib, f"LLAMA_TOKEN_ATTR_{name}"))


def cpu_features(system_info: str) -> list[str]:
    """The CPU features llama.cpp was built for and uses, from `llama_print_system_info` ("CPU : AVX2 = 1 | ...")."""
    features = []
    for part in system_info.replace("\n", "|").split("|"):
        name, _, value = part.rpartition("=")
        name = name.split(":")[-1].strip()
        if name and value.strip() == "1":
            features.append(name)
    return features


def _ggml_base(directory: Path) -> ctypes.CDLL | None:
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll"):
        if (directory / name).exists():
            base = ctypes.CDLL(str(directory / name))
            for fn in (base.ggml_commit, base.ggml_version):
                fn.restype, fn.argtypes = ctypes.c_char_p, []
            return base
    return None


_RECENT_ERRORS: deque[str] = deque(maxlen=3)  # llama.cpp's last error lines: why a model did not load
_LOG_CALLBACK: list[Any] = []  # the one callback given to llama.cpp, alive as long as the process (C keeps calling it)


def _route_logs(lib: Any) -> None:
    if not _LOG_CALLBACK:
        _LOG_CALLBACK.append(lib.llama_log_callback(_forward_log))
        lib.llama_log_set(_LOG_CALLBACK[0], ctypes.c_void_p(0))


def _forward_log(level: int, text: bytes, _user_data: object) -> None:
    # ggml writes a line in pieces; warnings and errors are worth a log line of their own
    if level in _GGML_LEVELS:
        line = text.decode("utf-8", "replace").rstrip()
        log.log(_GGML_LEVELS[level], "llama.cpp: %s", line)
        if _GGML_LEVELS[level] >= logging.ERROR and line:
            _RECENT_ERRORS.append(line)
