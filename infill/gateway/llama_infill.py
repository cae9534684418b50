"""llama.cpp's `/infill` on `infill-ls serve`, for the clients written against llama.cpp's server (llama.vim,
llama.vscode): the request fields they send, read into one pipeline completion, and the answer fields they read.

What the fields become (docs/gateway.md has the table):
- the gap is `input_prefix + prompt` | `input_suffix` (`prompt` is the cursor line's text before the cursor, which
  llama.vim keeps apart so that `input_prefix` stays the same while one line is typed);
- `input_extra` chunks (other files' text: llama.vim's ring of recently opened, edited and yanked lines) go ahead
  of the prefix as bounded extra context: the newest chunks that fit in a quarter of the pipeline's prefix window,
  each dedented and separated by a blank line, the local prefix keeping the rest of the window;
- `n_predict` caps the middle's tokens, and 0 is a cache warm-up: the prompt is encoded, nothing is generated;
- `t_max_prompt_ms + t_max_predict_ms` is the time budget (the pipeline does not time the two phases apart); once it
  has passed, the answer is the best draft so far as soon as that holds a finished line, cut after its last whole
  line (llama.cpp ends generation at the first line end past `t_max_predict_ms`), so a slow prompt is answered
  late rather than empty (llama.vim would cache an empty answer for that spot);
- `n_indent` ends the middle before the first later line indented less; `stop` strings cut it.

No HTTP here: `answer_infill` is a function of the parsed request, the settings, the pipeline, the model worker and
whether the client is still there; infill/gateway/server.py serves it.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infill.gateway.language import detect_language
from infill.gateway.openai_api import GatewaySettings, HttpError, optional_field, parse_stop
from infill.pipeline import CompletionRequest, Pipeline, PipelineResult
from infill.types import CancelToken, Draft, FillControl, InfillError
from infill.worker import ModelWorker, OnWorker

BUDGET_SPENT = "t_max_predict_ms passed and a whole line is ready"
MAX_STOP_STRINGS = 16  # llama.cpp takes any number; a bound keeps one request's cutting cheap
EXTRA_WINDOW_SHARE = 4  # input_extra gets at most 1/4 of the prefix window, as llama.cpp gives the prefix 3/4


@dataclass(frozen=True)
class ExtraChunk:
    filename: str
    text: str


@dataclass(frozen=True)
class InfillParams:
    prefix: str  # input_prefix + prompt: everything before the cursor
    suffix: str
    extra: tuple[ExtraChunk, ...]
    n_predict: int | None  # None: no cap of the client's (-1); 0: warm up only
    budget_ms: float | None  # t_max_prompt_ms + t_max_predict_ms; None: no limit of the client's
    n_indent: int
    stop: tuple[str, ...]
    response_fields: tuple[str, ...] | None
    id_slot: int
    document: str | None  # `infill_document` (this gateway's extension): the KV sequence to keep this in

    @property
    def warm_only(self) -> bool:
        return self.n_predict == 0


# -- request ----------------------------------------------------------------------------------------------------


def parse_infill_params(body: object, settings: GatewaySettings) -> InfillParams:
    if not isinstance(body, dict):
        raise HttpError(400, f"request body must be a JSON object, got {type(body).__name__}")

    def text(name: str, what: str) -> str:
        return optional_field(body, name, str, what) or ""

    prefix = text("input_prefix", "a string (the text before the cursor's line)")
    suffix = text("input_suffix", "a string (the text after the cursor)")
    line = text("prompt", "a string (the cursor line's text before the cursor)")
    n_predict = optional_field(body, "n_predict", int, "an integer")
    if n_predict is not None and not -1 <= n_predict <= settings.max_tokens_limit:
        raise HttpError(
            400,
            f"n_predict must be -1 (no limit), 0 (warm the cache) or up to "
            f"{settings.max_tokens_limit}, got {n_predict}",
            param="n_predict",
        )
    times = [
        optional_field(body, name, (int, float), "a number of milliseconds")
        for name in ("t_max_prompt_ms", "t_max_predict_ms")
    ]
    if any(t is not None and t < 0 for t in times):
        raise HttpError(400, "t_max_prompt_ms and t_max_predict_ms must be >= 0 (0: no limit)")
    n_indent = optional_field(body, "n_indent", int, "an integer") or 0
    if n_indent < 0:
        raise HttpError(400, f"n_indent must be >= 0, got {n_indent}", param="n_indent")
    if optional_field(body, "stream", bool, "true or false"):
        raise HttpError(400, "stream is not supported on /infill: send stream: false", param="stream")
    for name, kinds, what in (
        ("samplers", list, "a list"),
        ("cache_prompt", bool, "true or false"),
        ("temperature", (int, float), "a number"),
        ("top_k", int, "an integer"),
        ("top_p", (int, float), "a number"),
        ("model", str, "a string"),
    ):
        optional_field(body, name, kinds, what)  # accepted and ignored (docs/gateway.md says why), but well-typed
    document = optional_field(body, "infill_document", str, "a string")
    if document is not None and not 1 <= len(document) <= 128:
        raise HttpError(400, "infill_document must be 1 to 128 characters", param="infill_document")
    predict_ms = times[1] or 0
    return InfillParams(
        prefix=prefix + line,
        suffix=suffix,
        extra=_parse_extra(body.get("input_extra")),
        n_predict=None if n_predict in (None, -1) else n_predict,
        budget_ms=(times[0] or 0) + predict_ms if predict_ms > 0 else None,
        n_indent=n_indent,
        stop=parse_stop(body.get("stop"), MAX_STOP_STRINGS),
        response_fields=_parse_fields(body.get("response_fields")),
        id_slot=optional_field(body, "id_slot", int, "an integer") or 0,
        document=document,
    )


def _parse_extra(extra: object) -> tuple[ExtraChunk, ...]:
    if extra is None:
        return ()
    if not isinstance(extra, list):
        raise HttpError(400, "input_extra must be a list of {filename, text} objects", param="input_extra")
    chunks = []
    for i, chunk in enumerate(extra):
        if (
            not isinstance(chunk, dict)
            or not isinstance(chunk.get("text"), str)
            or not isinstance(chunk.get("filename", ""), str)
        ):
            raise HttpError(
                400, f"input_extra[{i}] must be an object with a string text (and filename)", param="input_extra"
            )
        chunks.append(ExtraChunk(chunk.get("filename", ""), chunk["text"]))
    return tuple(chunks)


def _parse_fields(fields: object) -> tuple[str, ...] | None:
    if fields is None:
        return None
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise HttpError(400, "response_fields must be a list of strings", param="response_fields")
    return tuple(fields)


# -- the document the pipeline sees -----------------------------------------------------------------------------


@dataclass(frozen=True)
class InfillDocument:
    text: str  # extra context, then the local prefix, then the suffix
    cursor: int
    truncated: bool  # extra chunks were left out or the local prefix was cut to make room


def build_document(params: InfillParams, pipeline: Pipeline) -> InfillDocument:
    """The extra chunks that fit (newest first: llama.vim's ring ends with its newest) ahead of the local prefix.
    With extra context the local prefix is cut, at a line start, to the rest of the prefix window, so that the
    pipeline's window (which keeps the text nearest the gap) still holds the extra context."""
    s = pipeline.settings
    window = int(min(s.prefix_chars, s.prefix_tokens * s.chars_per_token))
    budget, kept, dropped = window // EXTRA_WINDOW_SHARE, [], False
    for chunk in reversed(params.extra):
        body = textwrap.dedent(chunk.text)
        if not body.strip():
            continue
        body = body if body.endswith("\n") else body + "\n"
        if len(body) + 1 > budget:
            dropped = True
            continue
        kept.append(body)
        budget -= len(body) + 1
    if not kept:
        return InfillDocument(params.prefix + params.suffix, len(params.prefix), dropped)
    extra = "\n".join(reversed(kept)) + "\n"
    prefix, room = params.prefix, window - len(extra)
    cut = len(prefix) > room
    if cut:
        start = prefix.find("\n", len(prefix) - room)
        prefix = prefix[start + 1 :] if start >= 0 else prefix[len(prefix) - room :]
    return InfillDocument(extra + prefix + params.suffix, len(extra) + len(prefix), dropped or cut)


# -- answer -----------------------------------------------------------------------------------------------------


def _warm(
    pipeline: Pipeline,
    worker: ModelWorker,
    request: CompletionRequest,
    timeout_s: float,
    client_gone: Callable[[], bool],
) -> int:
    """Encode the request's prompt on the model worker, queued like a fill and cancelled when the client goes;
    the prompt tokens the backend now holds (0 when it never ran)."""
    token = CancelToken()
    future = worker.submit(
        lambda: pipeline.warm(pipeline.prepare(request), cancel=token),
        cancel=token,
        deadline=time.monotonic() + timeout_s,
        unrun=lambda why: 0,
    )
    return worker.wait(future, token, client_gone)


def answer_infill(
    params: InfillParams,
    settings: GatewaySettings,
    pipeline: Pipeline,
    worker: ModelWorker,
    client_gone: Callable[[], bool],
) -> dict[str, Any]:
    """One /infill answer (before `response_fields` picks from it)."""
    t0 = time.perf_counter()
    doc = build_document(params, pipeline)
    language = detect_language(params.prefix, params.suffix)  # the local text's language, not the extra's
    request = CompletionRequest(
        text=doc.text,
        start=doc.cursor,
        end=doc.cursor,
        mode="inline",
        language=language,
        max_middle_tokens=params.n_predict or None,
        document_id=f"remote:{params.document}" if params.document else None,
    )
    model = settings.model_name or pipeline.backend.info.model
    if params.warm_only:  # llama.cpp processes the prompt of an n_predict 0 request whatever its time limits
        held = _warm(pipeline, worker, request, settings.request_timeout_s, client_gone)
        return _body(params, model, "", None, doc.truncated, held, t0, language)
    latest: list[Draft] = []
    token = CancelToken()
    budget_end = time.monotonic() + params.budget_ms / 1000 if params.budget_ms is not None else None

    def keep(draft: Draft) -> None:  # (on the model thread)
        latest[:] = [draft]
        if budget_end is not None and time.monotonic() >= budget_end and _whole_lines(_first(draft)):
            token.cancel(BUDGET_SPENT)

    try:
        outcome = OnWorker(pipeline, worker, abandoned=client_gone).complete(
            request, FillControl(cancel=token, deadline=time.monotonic() + settings.request_timeout_s, on_draft=keep)
        )
    except InfillError as exc:
        raise HttpError(400, str(exc)) from exc
    spent = token.reason == BUDGET_SPENT and not outcome.fills  # (a fill that finished as it was stopped stands)
    return _body(params, model, _content(outcome, latest, spent), outcome, doc.truncated, None, t0, language, spent)


def _content(outcome: PipelineResult, latest: list[Draft], budget_spent: bool) -> str:
    result = outcome.result
    if not outcome.fills and result is not None and result.outcome == "error":
        raise HttpError(500, f"backend error: {result.error or 'unknown'}", kind="server_error")
    if outcome.fills:
        return outcome.fills[0].text
    if budget_spent and latest:  # the best draft so far (cleaned and checked as drafts are), its whole lines
        return _whole_lines(_first(latest[-1]))
    if result is not None and result.outcome == "cut_short" and latest:  # --request-timeout-s
        return _first(latest[-1])
    return ""


def _first(draft: Draft) -> str:
    return draft.middles[0] if draft.middles else ""


def _whole_lines(text: str) -> str:
    """`text` up to its last line break, when that keeps something to show; else ""."""
    cut = text.rfind("\n")
    return text[:cut] if cut > 0 and text[:cut].strip() else ""


def cut_at_dedent(text: str, n_indent: int) -> tuple[str, bool]:
    """`text` up to the first later line that is indented less than `n_indent` (llama.cpp's `n_indent`)."""
    if n_indent <= 0:
        return text, False
    offset = text.find("\n")
    while offset >= 0:
        line_end = text.find("\n", offset + 1)
        line = text[offset + 1 : line_end if line_end >= 0 else len(text)]
        if line.strip() and len(line) - len(line.lstrip(" \t")) < n_indent:
            return text[:offset], True
        offset = line_end
    return text, False


def _cut_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, str]:
    hits = [(i, s) for s in stops if (i := text.find(s)) >= 0]
    if not hits:
        return text, ""
    at, word = min(hits)
    return text[:at], word


def _body(
    params: InfillParams,
    model: str,
    content: str,
    outcome: PipelineResult | None,
    truncated: bool,
    warmed: int | None,
    t0: float,
    language: str | None,
    budget_spent: bool = False,
) -> dict[str, Any]:
    content, word = _cut_at_stop(content, params.stop)
    content, dedented = cut_at_dedent(content, params.n_indent)
    result = outcome.result if outcome is not None else None
    prompt_tokens = result.prompt_tokens if result else (warmed or 0)
    prompt_n = max(0, prompt_tokens - result.reused_tokens) if result else (warmed or 0)
    predicted_n = result.generated_tokens if result else 0
    prompt_ms = result.timings.encode_ms if result else (time.perf_counter() - t0) * 1000
    predicted_ms = result.timings.denoise_ms if result else 0.0
    limited = budget_spent or (result is not None and result.outcome == "cut_short")
    stop_type = "word" if word else "limit" if limited else "eos"
    return {
        "index": 0,
        "content": content,
        "id_slot": params.id_slot,
        "stop": True,
        "model": model,
        "tokens_predicted": predicted_n,
        "tokens_evaluated": prompt_tokens,
        "tokens_cached": prompt_tokens,
        "has_new_line": "\n" in content,
        "truncated": truncated,
        "stop_type": stop_type,
        "stopping_word": word,
        "stopped_eos": stop_type == "eos",
        "stopped_word": bool(word),
        "stopped_limit": limited,
        "timings": {
            "prompt_n": prompt_n,
            "prompt_ms": round(prompt_ms, 3),
            "prompt_per_token_ms": _per_token(prompt_ms, prompt_n),
            "prompt_per_second": _per_second(prompt_ms, prompt_n),
            "predicted_n": predicted_n,
            "predicted_ms": round(predicted_ms, 3),
            "predicted_per_token_ms": _per_token(predicted_ms, predicted_n),
            "predicted_per_second": _per_second(predicted_ms, predicted_n),
        },
        "infill": {
            "outcome": result.outcome if result else ("warmed" if warmed else "empty"),
            "route": outcome.route if outcome else "none",
            "backend": result.backend if result else None,
            "language": language,
            "cut_at_indent": dedented,
            "time_limit_reached": budget_spent,
            "latency_ms": round((time.perf_counter() - t0) * 1000, 3),
        },
    }


def _per_token(ms: float, n: int) -> float:
    return round(ms / n, 3) if n else 0.0


def _per_second(ms: float, n: int) -> float:
    return round(n * 1000 / ms, 3) if n and ms > 0 else 0.0


def pick_fields(body: dict[str, Any], fields: tuple[str, ...] | None) -> dict[str, Any]:
    """llama.cpp's `response_fields`: only the named fields, a path such as `timings/prompt_n` reaching into an
    object and keeping the path as its key; fields that are not there are left out."""
    if fields is None:
        return body
    picked = {}
    for path in fields:
        value, found = body, True
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                found = False
                break
            value = value[key]
        if found:
            picked[path] = value
    return picked


def encode_body(body: dict[str, Any]) -> bytes:
    """Compact JSON: llama.vim checks for `"content":"` with no space after the colon before it decodes."""
    return json.dumps(body, separators=(",", ":"), default=str).encode()
