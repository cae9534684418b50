"""Server settings as one validated, typed dataclass, read from initializationOptions, workspace/configuration
(section "infill") and workspace/didChangeConfiguration.

Clients send camelCase keys (see docs/server.md, "Protocol"). Each key's type is its field's annotation, which a
cattrs converter structures (a JSON integer by server/json_values.py's one rule): adding a setting is adding a
field (its range, if any, in `__post_init__`). Unknown or ill-typed keys never fail a request: `parse_settings`
keeps the previous value and returns a problem line that the server logs via window/logMessage.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Optional, get_type_hints

from cattrs import Converter

from infill.backends.remote.backend import PROTOCOLS
from infill.context.syntax import resolve_language
from infill.engine.config import LOAD_FORMATS, MAX_DENOISING_STEPS, QUANTIZATIONS
from infill.pipeline import MAX_MIDDLE_TOKENS
from infill.types import MAX_CANDIDATES, InfillError

from .json_values import json_integer


@dataclass(frozen=True)
class Settings:
    model: str | None = None  # DiffusionGemma checkpoint (dir or hub id) or a .gguf file; None: offline default
    # A GGUF the user has, on llama.cpp in place of Gemma 3 270M (infill/backends/offline/user_model.py); whether
    # it answers keystrokes: "auto" (where it is fast enough here), "yes", "no" (infill/backends/offline/routed.py).
    offline_model: str | None = None
    offline_model_keystrokes: str = "auto"
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
    # Fill gap and invoked inline requests on the offline default: fills written and ranked by their join with the
    # text after the gap (1: the greedy fill only). infill/backends/offline/ranking.py has the measurement behind 4.
    fill_candidates: int = 4
    # How long an explicit request (an invoked inline request, Fill gap) writes candidates other than the greedy
    # fill (infill/pipeline.py PipelineSettings.explicit_budget_ms).
    explicit_budget_ms: int = 2000
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
        need(1 <= self.explicit_budget_ms <= 600_000, "explicitBudgetMs must be in 1..600000 ms")
        need(1 <= self.fill_candidates <= MAX_CANDIDATES, f"fillCandidates must be in 1..{MAX_CANDIDATES}")
        need(1 <= self.max_middle_tokens <= MAX_MIDDLE_TOKENS, f"maxMiddleTokens must be in 1..{MAX_MIDDLE_TOKENS}")
        need(self.load_format in LOAD_FORMATS, f"loadFormat must be one of {', '.join(LOAD_FORMATS)}")
        need(self.quantization in QUANTIZATIONS, f"quantization must be one of {', '.join(QUANTIZATIONS)}")
        need(
            self.offline_model_keystrokes in ("auto", "yes", "no"),
            "offlineModelKeystrokes must be 'auto', 'yes' or 'no'",
        )
        need(self.remote_protocol in PROTOCOLS, f"remoteProtocol must be one of {', '.join(PROTOCOLS)}")
        need(1 <= self.max_document_chars <= 200_000_000, "maxDocumentChars must be in 1..200000000")
        need(
            self.denoising_steps is None or 1 <= self.denoising_steps <= MAX_DENOISING_STEPS,
            f"denoisingSteps must be in 1..{MAX_DENOISING_STEPS}",
        )
        need(self.kv_store_mib is None or 0 <= self.kv_store_mib <= 2**24, "kvStoreMib must be in 0..16777216 MiB")

    def language_enabled(self, language: str | None, document_id: str | None = None) -> bool:
        """Compared as the pipeline reads languages (`resolve_language`: aliases, case, the file's extension when
        the client names none), so `py`, or "" on `x.pyi`, is Python to `["python"]` as it is to the pipeline."""
        if not self.enabled_languages:
            return True
        enabled = {resolve_language(name) for name in self.enabled_languages}
        return resolve_language(language) in enabled or resolve_language(language, document_id) in enabled

    def backend_key(self) -> tuple[object, ...]:
        """What selects and loads the backend: a change in any of these reloads it."""
        return tuple(getattr(self, name) for name in (*SPEC_FIELDS, *_LOADING))


# The settings that become the backend's spec (infill/backends/choose.py BackendSpec), by the spec field each sets.
SPEC_FIELDS = {
    "model": "model",
    "device": "device",
    "dtype": "dtype",
    "load_format": "load_format",
    "quantization": "quantization",
    "offline_model": "offline_model",
    "offline_model_keystrokes": "offline_model_keystrokes",
    "remote_endpoint": "endpoint",
    "remote_model": "endpoint_model",
    "remote_protocol": "endpoint_protocol",
}
# The other settings a change of which reloads the backend: the fallback's and the engine's own.
_LOADING = ("fallback", "fallback_endpoint", "fallback_model", "denoising_steps", "kv_store_mib")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_MEASURED = ("inline_budget_ms", "invoked_budget_ms")  # None: the guard server/budget.py measures
_CAMEL = {f.name: _camel(f.name) for f in fields(Settings)}
_FIELD_OF = {camel: name for name, camel in _CAMEL.items()}
_TYPES = get_type_hints(Settings)  # each setting's type is its annotation above: the one place to add a setting


def _text(value: Any, _type: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("a string")
    return value


def _optional_text(value: Any, _type: Any) -> str | None:
    if value is None:
        return None
    return _text(value, str).strip() or None  # "" means "not set"


def _integer(value: Any, _type: Any) -> int:
    if (number := json_integer(value)) is None:
        raise TypeError("an integer")
    return number


def _switch(value: Any, _type: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("true or false")
    return value


def _languages(value: Any, _type: Any) -> tuple[str, ...]:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TypeError("a list of language ids")


_CONVERTER = Converter()
_CONVERTER.register_structure_hook(str, _text)
_CONVERTER.register_structure_hook(Optional[str], _optional_text)  # noqa: UP045 - cattrs matches the object
_CONVERTER.register_structure_hook(int, _integer)
_CONVERTER.register_structure_hook(Optional[int], lambda v, t: None if v is None else _integer(v, t))  # noqa: UP045
_CONVERTER.register_structure_hook(bool, _switch)
_CONVERTER.register_structure_hook_func(lambda t: t == tuple[str, ...], _languages)


def _coerce(name: str, value: Any) -> Any:
    """The typed value for field `name` (structured by its annotation), or raise TypeError naming the expected
    type."""
    try:
        return _CONVERTER.structure(value, _TYPES[name])
    except TypeError:
        raise
    except Exception as exc:  # noqa: BLE001 - cattrs wraps a hook's TypeError in its own errors
        cause = next((e for e in getattr(exc, "exceptions", ()) if isinstance(e, TypeError)), None)
        raise TypeError(str(cause) if cause else "a known type") from exc


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
