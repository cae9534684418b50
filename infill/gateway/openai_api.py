"""The OpenAI-compatible `/v1/completions` contract of `infill-ls serve`: request validation (errors in OpenAI's
shape), one completion through the pipeline, and the response body with its `infill` extension. No HTTP here
(infill/gateway/server.py serves it)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from infill.completion import Completer
from infill.gateway.fim_prompts import split_fim_prompt
from infill.gateway.language import detect_language
from infill.pipeline import MAX_MIDDLE_TOKENS, CompletionRequest, PipelineResult
from infill.types import MAX_CANDIDATES, FillControl, InfillError

MAX_STOP_SEQUENCES = 4


class HttpError(Exception):
    """An answer other than 200, with the message the client sees (OpenAI error shape)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class GatewaySettings:
    token: str | None = None
    max_body_bytes: int = 1 << 20
    max_tokens_limit: int = MAX_MIDDLE_TOKENS  # max_tokens above this is refused as absurd
    request_timeout_s: float = 60.0  # every completion is cut short by then
    model_name: str | None = None  # the id /v1/models lists; default: the backend's model

    def __post_init__(self) -> None:
        checks = [
            (
                self.token is None or isinstance(self.token, str) and bool(self.token.strip()),
                "token must be a non-empty string",
            ),
            (
                isinstance(self.max_body_bytes, int) and self.max_body_bytes >= 1024,
                f"max_body_bytes must be an integer >= 1024, got {self.max_body_bytes!r}",
            ),
            (
                isinstance(self.max_tokens_limit, int) and self.max_tokens_limit >= 1,
                f"max_tokens_limit must be a positive integer, got {self.max_tokens_limit!r}",
            ),
            (
                isinstance(self.request_timeout_s, (int, float)) and self.request_timeout_s > 0,
                f"request_timeout_s must be > 0, got {self.request_timeout_s!r}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise InfillError(f"invalid gateway setting: {message}")


@dataclass(frozen=True)
class CompletionParams:
    prompt: str
    suffix: str
    max_tokens: int | None
    stop: tuple[str, ...]
    stream: bool
    mode: Literal["inline", "gap"]
    language: str | None
    budget_ms: float | None  # `infill_budget_ms`: the caller's remaining time (RemoteBackend sends it)
    document: str | None = None  # `infill_document`: an opaque document key; a newer request for it stops older ones
    fim_format: str | None = None  # the FIM-token format `prompt` was split from (infill/gateway/fim_prompts.py)
    best_of: int = 1  # fills written and the one that best joins the suffix returned (InfillRequest.candidates)


# -- request validation -----------------------------------------------------------------------------------------


def optional_field(body: dict[str, Any], name: str, kinds: type | tuple[type, ...], what: str) -> Any:
    value = body.get(name)
    accepts_bool = bool in (kinds if isinstance(kinds, tuple) else (kinds,))
    if value is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and not accepts_bool)):
        raise HttpError(400, f"{name} must be {what}, got {type(value).__name__}", param=name)
    return value


def parse_completion_params(body: object, settings: GatewaySettings) -> CompletionParams:
    if not isinstance(body, dict):
        raise HttpError(400, f"request body must be a JSON object, got {type(body).__name__}")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise HttpError(400, "prompt must be a string (the text before the gap)", param="prompt")
    suffix = optional_field(body, "suffix", str, "a string (the text after the gap)")
    fim = split_fim_prompt(prompt) if suffix is None else None  # a client-built FIM prompt (Zed's) has no suffix
    if fim is not None:
        prompt, suffix = fim.prefix, fim.suffix
    suffix = suffix or ""
    max_tokens = optional_field(body, "max_tokens", int, "an integer")
    if max_tokens is not None and not 1 <= max_tokens <= settings.max_tokens_limit:
        raise HttpError(
            400, f"max_tokens must be between 1 and {settings.max_tokens_limit}, got {max_tokens}", param="max_tokens"
        )
    if optional_field(body, "n", int, "an integer") not in (None, 1):
        raise HttpError(400, "n must be 1: this server returns one completion per request", param="n")
    best_of = optional_field(body, "best_of", int, "an integer")
    best_of = 1 if best_of is None else best_of
    if not 1 <= best_of <= MAX_CANDIDATES:
        raise HttpError(400, f"best_of must be between 1 and {MAX_CANDIDATES}, got {best_of}", param="best_of")
    temperature = optional_field(body, "temperature", (int, float), "a number")
    if temperature is not None and not 0 <= temperature <= 2:
        raise HttpError(400, f"temperature must be between 0 and 2, got {temperature}", param="temperature")
    if body.get("echo"):
        raise HttpError(400, "echo is not supported", param="echo")
    if body.get("logprobs") is not None:
        raise HttpError(400, "logprobs are not supported", param="logprobs")
    optional_field(body, "model", str, "a string")
    mode = optional_field(body, "mode", str, "a string") or "inline"
    if mode not in ("inline", "gap"):
        raise HttpError(400, f"mode must be 'inline' or 'gap', got {mode!r}", param="mode")
    budget_ms = optional_field(body, "infill_budget_ms", (int, float), "a number of milliseconds")
    if budget_ms is not None and budget_ms <= 0:
        raise HttpError(400, "infill_budget_ms must be > 0", param="infill_budget_ms")
    document = optional_field(body, "infill_document", str, "a string")
    if document is not None and not 1 <= len(document) <= 128:
        raise HttpError(400, "infill_document must be 1 to 128 characters", param="infill_document")
    return CompletionParams(
        prompt=prompt,
        suffix=suffix,
        max_tokens=max_tokens,
        stop=parse_stop(body.get("stop")),
        stream=bool(optional_field(body, "stream", bool, "true or false")),
        mode="gap" if mode == "gap" else "inline",
        language=optional_field(body, "language", str, "a string"),
        budget_ms=budget_ms,
        document=document,
        fim_format=fim.format if fim is not None else None,
        best_of=best_of,
    )


def parse_stop(stop: object, limit: int = MAX_STOP_SEQUENCES) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or len(stops) > limit or not all(isinstance(s, str) and s for s in stops):
        raise HttpError(400, f"stop must be a non-empty string or a list of up to {limit} of them", param="stop")
    return tuple(stops)


# -- completion -------------------------------------------------------------------------------------------------


def run_completion(
    pipeline: Completer, params: CompletionParams, settings: GatewaySettings
) -> tuple[dict[str, Any], str, str]:
    """Run one completion; returns (infill extension object, text, finish_reason)."""
    start = len(params.prompt)
    language = params.language or detect_language(params.prompt, params.suffix)
    request = CompletionRequest(
        text=params.prompt + params.suffix,
        start=start,
        end=start,
        mode=params.mode,
        language=language,
        max_middle_tokens=params.max_tokens,
        document_id=f"remote:{params.document}" if params.document else None,
        candidates=params.best_of,
        explicit=params.best_of > 1,  # a client that asks for ranked fills waits for them
    )
    budget_s = settings.request_timeout_s
    if params.budget_ms is not None:
        budget_s = min(budget_s, params.budget_ms / 1000)
    t0 = time.perf_counter()
    try:
        outcome = pipeline.complete(request, FillControl(deadline=time.monotonic() + budget_s))
    except InfillError as exc:
        raise HttpError(400, str(exc)) from exc
    latency_ms = (time.perf_counter() - t0) * 1000
    result = outcome.result
    if not outcome.fills and result is not None and result.outcome == "error":
        raise HttpError(500, f"backend error: {result.error or 'unknown'}", kind="server_error")
    text = outcome.fills[0].text if outcome.fills else ""
    text, stopped = _apply_stop(text, params.stop)
    finish = "stop" if stopped or result is None or result.outcome != "cut_short" else "length"
    return _extension(outcome, latency_ms, start), text, finish


def _apply_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def _extension(outcome: PipelineResult, latency_ms: float, start: int) -> dict[str, Any]:
    result = outcome.result
    fill = outcome.fills[0] if outcome.fills else None
    return {
        "outcome": result.outcome if result else "empty",
        "route": outcome.route,
        "backend": result.backend if result else None,
        "steps": result.steps if result else 0,
        "tokens_per_forward": result.tokens_per_forward if result else 0.0,
        "completion_tokens": result.generated_tokens if result else 0,
        "latency_ms": round(latency_ms, 2),
        "pipeline_ms": round(outcome.total_ms, 2),
        "context_ms": round(outcome.context_ms, 2),
        "encode_ms": round(result.timings.encode_ms, 2) if result else 0.0,
        "denoise_ms": round(result.timings.denoise_ms, 2) if result else 0.0,
        "prompt_tokens": result.prompt_tokens if result else 0,
        "reused_tokens": result.reused_tokens if result else 0,
        "max_middle_tokens": outcome.max_middle_tokens,
        "single_line": outcome.single_line,
        "rejections": [list(r) for r in outcome.rejections],
        "error": result.error if result else None,
        "versions": result.versions if result else {},
        # Where the text goes, as offsets into prompt + suffix (a fill may replace more than the empty gap).
        "replace": [fill.start, fill.end] if fill else [start, start],
    }


def completion_body(model: str, text: str, finish: str, extension: dict[str, Any]) -> dict[str, Any]:
    prompt_tokens, completion_tokens = extension["prompt_tokens"], extension["completion_tokens"]
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"text": text, "index": 0, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "infill": extension,
    }
