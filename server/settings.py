"""Server settings as one validated, typed dataclass, read from initializationOptions, workspace/configuration
(section "infill") and workspace/didChangeConfiguration.

Clients send camelCase keys (see docs/TEAM.md, "LSP protocol"). Unknown or ill-typed keys never fail a request:
`parse_settings` keeps the previous value and returns a problem line that the server logs via window/logMessage.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from infill.types import MAX_CANDIDATES, InfillError

from .json_values import json_integer


@dataclass(frozen=True)
class Settings:
    model: str | None = None  # DiffusionGemma checkpoint (dir or hub id); None: offline default or remote
    device: str | None = None
    dtype: str | None = None
    load_format: str = "auto"
    quantization: str = "none"  # "fp8": DiffusionGemma's projections and experts in FP8, quantized at load
    enabled: bool = True
    # Deadlines of inline requests after the debounce; None: the runaway guard measured on this machine
    # (server/scheduling.py). An explicit value wins.
    inline_budget_ms: int | None = None  # automatic trigger
    invoked_budget_ms: int | None = None  # explicitly invoked (no debounce)
    code_action_budget_ms: int = 10000
    # Fill gap on the offline default: fills written and ranked by their join with the text after the gap (1: the
    # greedy fill only). infill/backends/offline/ranking.py has the measurement behind 4.
    fill_candidates: int = 4
    debounce_ms: int = 50  # short: the prompt is encoded meanwhile and kept; a superseded run stops in one forward
    max_middle_tokens: int = 64
    enabled_languages: tuple[str, ...] = ()  # empty: every language
    # A fill the watchdog rejects (or a primary that fails or runs out of its share of the budget) is answered by
    # the conventional model: `fallback_endpoint` where set, else the offline default loaded beside a DiffusionGemma
    # checkpoint or a remote endpoint (infill/loader.py fallback_spec). False: nothing answers.
    fallback: bool = True
    fallback_endpoint: str | None = None
    fallback_model: str | None = None
    remote_endpoint: str | None = None
    remote_model: str | None = None
    remote_protocol: str = "auto"  # "auto", "openai" or "vllm-diffusion" (vLLM serving DiffusionGemma; docs/vllm.md)
    completion_log: str | None = None  # opt-in JSONL log of completions and telemetry; None: nothing written
    max_document_chars: int = 2_000_000  # larger documents are refused politely (bounded work per request)
    denoising_steps: int | None = (
        None  # DiffusionGemma step cap; None: the checkpoint's generation_config.json, else 48
    )
    kv_store_mib: int | None = None  # DiffusionGemma prompt-cache bound; None: sized by model and device
    related_files: bool = False  # fills read definitions from the other open documents (infill/context/related.py)

    def __post_init__(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise InfillError(f"invalid setting: {message}")

        for name in ("inline_budget_ms", "invoked_budget_ms", "code_action_budget_ms"):
            value = getattr(self, name)
            need(
                (value is None and name in _MEASURED) or (value is not None and 0 < value <= 600_000),
                f"{_CAMEL[name]} must be in 1..600000 ms" + (" (or null: measured)" if name in _MEASURED else ""),
            )
        need(0 <= self.debounce_ms <= 10_000, "debounceMs must be in 0..10000")
        need(1 <= self.fill_candidates <= MAX_CANDIDATES, f"fillCandidates must be in 1..{MAX_CANDIDATES}")
        need(1 <= self.max_middle_tokens <= 4096, "maxMiddleTokens must be in 1..4096")
        need(self.load_format in ("auto", "dummy"), "loadFormat must be 'auto' or 'dummy'")
        need(self.quantization in ("none", "fp8"), "quantization must be 'none' or 'fp8'")
        need(
            self.remote_protocol in ("auto", "openai", "vllm-diffusion"),
            "remoteProtocol must be 'auto', 'openai' or 'vllm-diffusion'",
        )
        need(1 <= self.max_document_chars <= 200_000_000, "maxDocumentChars must be in 1..200000000")
        need(self.denoising_steps is None or 1 <= self.denoising_steps <= 1024, "denoisingSteps must be in 1..1024")
        need(self.kv_store_mib is None or 0 <= self.kv_store_mib <= 2**24, "kvStoreMib must be in 0..16777216 MiB")

    def language_enabled(self, language: str | None) -> bool:
        return not self.enabled_languages or (language or "") in self.enabled_languages

    def backend_key(self) -> tuple[object, ...]:
        """What selects and loads the backend: a change in any of these reloads it."""
        return (
            self.model,
            self.device,
            self.dtype,
            self.load_format,
            self.quantization,
            self.remote_endpoint,
            self.remote_model,
            self.remote_protocol,
            self.fallback,
            self.fallback_endpoint,
            self.fallback_model,
            self.denoising_steps,
            self.kv_store_mib,
        )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_MEASURED = ("inline_budget_ms", "invoked_budget_ms")  # None: the guard server/scheduling.py measures
_CAMEL = {f.name: _camel(f.name) for f in fields(Settings)}
_FIELD_OF = {camel: name for name, camel in _CAMEL.items()}
_OPTIONAL_TEXT = {
    "model",
    "device",
    "dtype",
    "fallback_endpoint",
    "fallback_model",
    "remote_endpoint",
    "remote_model",
    "completion_log",
}
_INTEGERS = {
    "inline_budget_ms",
    "invoked_budget_ms",
    "code_action_budget_ms",
    "debounce_ms",
    "max_middle_tokens",
    "max_document_chars",
    "denoising_steps",
    "kv_store_mib",
    "fill_candidates",
}


def _coerce(name: str, value: Any) -> Any:
    """The typed value for field `name`, or raise TypeError naming the expected type."""
    if name in _OPTIONAL_TEXT:
        if isinstance(value, str):
            return value.strip() or None  # "" means "not set"
        if value is None:
            return None
        raise TypeError("a string")
    if name in ("load_format", "remote_protocol", "quantization"):
        if isinstance(value, str):
            return value
        raise TypeError("a string")
    if name in ("enabled", "related_files", "fallback"):
        if isinstance(value, bool):
            return value
        raise TypeError("true or false")
    if name in ("denoising_steps", "kv_store_mib", *_MEASURED) and value is None:
        return None
    if name in _INTEGERS:
        if (number := json_integer(value)) is None:
            raise TypeError("an integer")
        return number
    if name == "enabled_languages":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise TypeError("a list of language ids")
    raise TypeError("a known type")  # unreachable: every field is listed above


def clean_layer(raw: Any, current: Settings) -> tuple[dict[str, Any], list[str]]:
    """The keys of one client settings object that are known, well-typed and in range (camelCase, as sent), and
    one problem line per other key. Storing only clean layers means a bad key in a newer layer leaves the value
    an older layer (or the command line) gave in place, as the message says."""
    if raw is None:
        return {}, []
    if not isinstance(raw, dict):
        return {}, [f"infill settings must be an object, got {type(raw).__name__}; ignored"]
    if isinstance(raw.get("infill"), dict):
        raw = {**{k: v for k, v in raw.items() if k != "infill"}, **raw["infill"]}
    accepted: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        name = _FIELD_OF.get(key)
        if name is None:
            problems.append(f"unknown setting infill.{key}; ignored")
            continue
        try:
            replace(Settings(), **{name: _coerce(name, value)})
        except TypeError as exc:
            problems.append(f"setting infill.{key} must be {exc}, got {value!r}; kept {getattr(current, name)!r}")
            continue
        except (InfillError, ValueError, OverflowError) as exc:
            problems.append(f"{exc}; kept {getattr(current, name)!r}")
            continue
        accepted[key] = value
    return accepted, problems


def parse_settings(raw: Any, base: Settings) -> tuple[Settings, list[str]]:
    """Overlay the client's settings object on `base`. Returns the new settings and the problems found (unknown
    keys, wrong types, out-of-range values), each one line for window/logMessage. Never raises."""
    accepted, problems = clean_layer(raw, base)
    settings = base
    for key, value in accepted.items():
        name = _FIELD_OF[key]
        try:
            settings = replace(settings, **{name: _coerce(name, value)})
        except InfillError as exc:  # valid alone, but not together with the other settings
            problems.append(f"{exc}; kept {getattr(settings, name)!r}")
    return settings, problems
