"""Validated engine configuration. Defaults reproduce transformers' DiffusionGemma generation defaults."""

from __future__ import annotations

from dataclasses import dataclass, fields
from infill.types import InfillError

@dataclass(frozen=True)
class EngineConfig:
    max_denoising_steps: int = 48
    t_min: float = 0.4
    t_max: float = 0.8
    entropy_bound: float = 0.1
    stability_threshold: int = 1
    confidence_threshold: float = 0.005
    canvas_length: int | None = None  # widest canvas; None: the model's config.canvas_length
    candidate_lengths: tuple[int, ...] = (4, 8, 16, 32, 64)  # middle lengths tried as one batch, capped per request
    suffix_anchor_tokens: int = 16  # suffix tokens clamped at the end of the canvas
    # Single-line gaps are short: a narrow canvas. None picks by device: three candidate rows on a GPU, where extra
    # rows at batch 1 are nearly free, one 24-slot row on a CPU, where every row costs compute (the line then ends
    # at the first newline or EOS). benchmarks/engine.py measures both.
    single_line_lengths: tuple[int, ...] | None = None
    single_line_anchor_tokens: int = 8
    # Suffix text beyond the canvas anchor can go in the prompt, *before* the prefix (so typing at the cursor only
    # invalidates the prompt's tail): [BOS] frame[0] suffix frame[1] prefix. 0 disables it. Untuned: the
    # checkpoint has no FIM tokens, so the frame is plain text.
    suffix_in_prompt_tokens: int = 0
    suffix_frame: tuple[str, str] = ("<suffix>\n", "\n</suffix>\n")
    max_prompt_tokens: int = 8192  # far end of the prefix dropped beyond this (whole lines at a time)
    kv_store_bytes: int = 512 * 2**20  # bound on cached prefix KV across documents (LRU eviction)
    seed: int | None = 0  # default seed per request (None: nondeterministic)

    def __post_init__(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise InfillError(f"invalid engine config: {message}")

        need(isinstance(self.max_denoising_steps, int) and self.max_denoising_steps > 0,
             f"max_denoising_steps must be a positive integer, got {self.max_denoising_steps!r}")
        need(0 <= self.t_min < self.t_max, f"need 0 <= t_min < t_max, got {self.t_min}, {self.t_max}")
        need(self.entropy_bound > 0, f"entropy_bound must be > 0, got {self.entropy_bound}")
        need(isinstance(self.stability_threshold, int) and self.stability_threshold >= 0,
             f"stability_threshold must be an integer >= 0, got {self.stability_threshold!r}")
        need(self.confidence_threshold > 0, f"confidence_threshold must be > 0, got {self.confidence_threshold}")
        need(self.canvas_length is None or self.canvas_length >= 2, "canvas_length must be >= 2")
        need(len(self.candidate_lengths) > 0 and all(isinstance(n, int) and n > 0 for n in self.candidate_lengths),
             "candidate_lengths must be positive integers")
        need(self.suffix_anchor_tokens >= 0 and self.single_line_anchor_tokens >= 0, "anchor tokens must be >= 0")
        need(self.single_line_lengths is None or (len(self.single_line_lengths) > 0 and all(
            isinstance(n, int) and n > 0 for n in self.single_line_lengths)), "single_line_lengths must be positive "
             "integers (or None: by device)")
        need(self.max_prompt_tokens >= 16, "max_prompt_tokens must be >= 16")
        need(0 <= self.suffix_in_prompt_tokens < self.max_prompt_tokens // 2,
             "suffix_in_prompt_tokens must be >= 0 and below half of max_prompt_tokens")
        need(len(self.suffix_frame) == 2, "suffix_frame is (text before the suffix, text after it)")
        need(self.kv_store_bytes >= 0, "kv_store_bytes must be >= 0")

    def single_line_lengths_for(self, device: str) -> tuple[int, ...]:
        if self.single_line_lengths is not None:
            return self.single_line_lengths
        return (6, 12, 24) if device.startswith("cuda") else (24,)

    def describe(self) -> dict:
        """Sampler and stopping parameters, for the versions block of every result."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
