"""The offline default's settings (`ARSettings`) and the llama.cpp context shape they imply."""

from __future__ import annotations

from dataclasses import dataclass

from infill.backends.offline.runtime import RuntimeShape
from infill.cache.tokens import EXTRA_CONTEXT_TOKENS
from infill.device import physical_cores, threads_from_env
from infill.types import InfillError, require_integers

GENERATION_ROOM = 512  # tokens a sequence holds beyond the longest prompt (fills and multi-gap text between)


@dataclass(frozen=True)
class ARSettings:
    # Prompt window; longer prefixes keep their near end (whole lines). A prompt starts with at most
    # fresh_prompt_tokens and grows from its cached start up to max_prompt_tokens while that encodes no more anew
    # than starting over would (`_fit`). fresh_prompt_tokens None: sized by this CPU's speed, measured at load
    # (infill/backends/offline/calibration.py); a number: exactly that many.
    max_prompt_tokens: int = 1024
    fresh_prompt_tokens: int | None = None
    documents: int = 4  # documents whose prompt stays encoded, a llama.cpp KV sequence each (~18 KiB per token)
    # Tokens per decode call while encoding a prompt; a cancel or the deadline is seen between chunks, and the chunks
    # done stay encoded. Not inside a chunk: every keystroke cancels the request before it, and a chunk cut short
    # would be lost, so warming would never get ahead (its prompt shares all but the edited tail with the next).
    # 128: a 384-token prompt encoded in three calls took 538 ms here, in one 559 ms; a cancel waits ~0.2 s at most.
    prefill_chunk_tokens: int = 128
    num_threads: int | None = None  # llama.cpp threads; None: env INFILL_THREADS, else the physical cores
    token_healing: bool = True  # re-choose the prompt's last token (a trailing space or half a word) when decoding
    # Tokens drafted from the context and verified per forward (0: one token per forward). None: DEFAULT_DRAFTS
    # where a wider forward is cheap enough on this CPU to pay, else 0 (measured at load).
    draft_tokens: int | None = None
    draft_ngram: int = 3  # longest run of last tokens looked up in the context to draft from
    extra_context_tokens: int = EXTRA_CONTEXT_TOKENS  # most tokens of other files' code a prompt holds
    # Most tokens of the text after the gap in a FIM model's prompt (fim.py; a model without FIM tokens reads none).
    # The issue 49 probe that doubled exact with Qwen2.5-Coder kept the suffix's first 600 characters.
    fim_suffix_tokens: int = 192

    def __post_init__(self) -> None:
        least = {"max_prompt_tokens": 16, "documents": 1, "prefill_chunk_tokens": 16, "draft_ngram": 2}
        require_integers(self, least | {"extra_context_tokens": 0, "fim_suffix_tokens": 0})
        fresh = self.fresh_prompt_tokens
        if fresh is not None and (
            not isinstance(fresh, int) or isinstance(fresh, bool) or not 16 <= fresh <= self.max_prompt_tokens
        ):
            raise InfillError(
                f"fresh_prompt_tokens must be None or an integer from 16 to max_prompt_tokens "
                f"({self.max_prompt_tokens}), got {fresh!r}"
            )
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads < 1):
            raise InfillError(f"num_threads must be a positive integer or None, got {self.num_threads!r}")
        if self.draft_tokens is not None and (
            not isinstance(self.draft_tokens, int) or not 0 <= self.draft_tokens <= 15
        ):
            raise InfillError(f"draft_tokens must be an integer in 0..15, got {self.draft_tokens!r}")

    def runtime_shape(self) -> RuntimeShape:
        longest = self.max_prompt_tokens + self.extra_context_tokens + self.fim_suffix_tokens + GENERATION_ROOM
        return RuntimeShape(
            sequences=self.documents,
            sequence_tokens=longest,
            batch_tokens=self.prefill_chunk_tokens,
            max_outputs=16,
            threads=self.num_threads or threads_from_env() or physical_cores(),
        )
