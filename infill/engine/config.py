"""Validated engine configuration. Defaults reproduce transformers' DiffusionGemma generation defaults; a
checkpoint's own sampler settings (its generation_config.json) replace them, and explicit settings replace both
(`resolve_engine_config`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, get_args

from infill.types import InfillError

# Ranges and choices of the engine's settings, here so every place a user sets them (the command line, the LSP
# settings, the loader) checks the one range: steps a request may denoise, how a checkpoint loads.
MAX_DENOISING_STEPS = 1024
LoadFormat = Literal["auto", "dummy"]  # "dummy": the checkpoint's architecture with random weights
Quantization = Literal["none", "fp8"]  # "fp8": projections and experts quantized at load (engine/fp8.py)
LOAD_FORMATS: tuple[str, ...] = get_args(LoadFormat)
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)


def valid_denoising_steps(steps: object) -> bool:
    return isinstance(steps, int) and not isinstance(steps, bool) and 1 <= steps <= MAX_DENOISING_STEPS


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
    # Bound on the prompts of other documents kept beside the live KV buffers (LRU eviction), so returning to a
    # document does not re-encode it. None: sized from the model and the device (infill/engine/kv.stash_budget).
    kv_store_bytes: int | None = None
    seed: int | None = 0  # default seed per request (None: nondeterministic)
    # CUDA only: encodes and denoising steps replayed as CUDA graphs captured at load (runner.py, graphs.py).
    cuda_graphs: bool = True
    # Run the bucketed programs (runner.py: canvases and encodes padded to fixed shapes). None: where they are
    # captured, on CUDA with cuda_graphs. True on a CPU runs their arithmetic eagerly, which is how the CPU tests
    # check it; False on CUDA runs every shape eagerly.
    static_programs: bool | None = None
    # CUDA only: each layer's small operations fused by torch.compile before capture (runner.compile_layers). Off
    # until a GPU run shows what it costs at load and saves a step (benchmarks/engine_gpu.py, section "compile").
    compile: bool = False
    # How the routed experts are applied: "auto", or a kernel of infill/engine/experts.py (benchmarks/engine_gpu.py
    # measures them at the real shapes).
    expert_kernel: str = "auto"

    def __post_init__(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise InfillError(f"invalid engine config: {message}")

        need(
            valid_denoising_steps(self.max_denoising_steps),
            f"max_denoising_steps must be an integer in 1..{MAX_DENOISING_STEPS}, got {self.max_denoising_steps!r}",
        )
        need(0 <= self.t_min < self.t_max, f"need 0 <= t_min < t_max, got {self.t_min}, {self.t_max}")
        need(self.entropy_bound > 0, f"entropy_bound must be > 0, got {self.entropy_bound}")
        need(
            isinstance(self.stability_threshold, int) and self.stability_threshold >= 0,
            f"stability_threshold must be an integer >= 0, got {self.stability_threshold!r}",
        )
        need(self.confidence_threshold > 0, f"confidence_threshold must be > 0, got {self.confidence_threshold}")
        need(self.canvas_length is None or self.canvas_length >= 2, "canvas_length must be >= 2")
        need(
            len(self.candidate_lengths) > 0 and all(isinstance(n, int) and n > 0 for n in self.candidate_lengths),
            "candidate_lengths must be positive integers",
        )
        need(self.suffix_anchor_tokens >= 0 and self.single_line_anchor_tokens >= 0, "anchor tokens must be >= 0")
        need(
            self.single_line_lengths is None
            or (
                len(self.single_line_lengths) > 0
                and all(isinstance(n, int) and n > 0 for n in self.single_line_lengths)
            ),
            "single_line_lengths must be positive integers (or None: by device)",
        )
        need(self.max_prompt_tokens >= 16, "max_prompt_tokens must be >= 16")
        need(
            0 <= self.suffix_in_prompt_tokens < self.max_prompt_tokens // 2,
            "suffix_in_prompt_tokens must be >= 0 and below half of max_prompt_tokens",
        )
        need(len(self.suffix_frame) == 2, "suffix_frame is (text before the suffix, text after it)")
        need(
            isinstance(self.cuda_graphs, bool) and isinstance(self.compile, bool),
            "cuda_graphs and compile must be true or false",
        )
        need(
            self.static_programs is None or isinstance(self.static_programs, bool),
            "static_programs must be true, false or None (on CUDA with cuda_graphs)",
        )
        need(
            self.expert_kernel in ("auto", "grouped", "pairs"),
            f"expert_kernel must be auto, grouped or pairs, got {self.expert_kernel!r}",
        )
        need(
            self.kv_store_bytes is None or (isinstance(self.kv_store_bytes, int) and self.kv_store_bytes >= 0),
            "kv_store_bytes must be an integer >= 0 (or None: sized from the model and device)",
        )

    def single_line_lengths_for(self, device: str) -> tuple[int, ...]:
        if self.single_line_lengths is not None:
            return self.single_line_lengths
        return (6, 12, 24) if device.startswith("cuda") else (24,)

    def canvas_plan(self, single_line: bool, device: str) -> tuple[tuple[int, ...], int]:
        """A request's candidate middle lengths (a canvas row each) and its suffix anchor's token count on `device`:
        the one plan of the in-process engine and of vLLM's native route."""
        if single_line:
            return self.single_line_lengths_for(device), self.single_line_anchor_tokens
        return tuple(self.candidate_lengths), self.suffix_anchor_tokens

    def static_programs_on(self, device: str) -> bool:
        """Whether the runner runs the bucketed programs on `device` (`static_programs`, or where it captures them)."""
        if self.static_programs is not None:
            return self.static_programs
        return device.startswith("cuda") and self.cuda_graphs

    def max_rows(self, device: str) -> int:
        """The most canvas rows any request's plan asks on `device`."""
        return max(len(self.canvas_plan(single_line, device)[0]) for single_line in (False, True))

    def describe(self) -> dict[str, Any]:
        """Sampler and stopping parameters, for the versions block of every result."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class EngineOverrides:
    """The engine settings a caller gave explicitly, and only those: None is "not given", so the checkpoint's own
    value (generation_config.json) or the default applies. What the shared model options and the server carry to
    the engine; an EngineConfig cannot carry this, since a value equal to its default reads as not given."""

    max_denoising_steps: int | None = None
    kv_store_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.max_denoising_steps is not None and not valid_denoising_steps(self.max_denoising_steps):
            raise InfillError(
                f"denoising steps must be an integer in 1..{MAX_DENOISING_STEPS}, got {self.max_denoising_steps!r}"
            )
        if self.kv_store_bytes is not None and not (isinstance(self.kv_store_bytes, int) and self.kv_store_bytes >= 0):
            raise InfillError(f"kv_store_bytes must be an integer >= 0, got {self.kv_store_bytes!r}")

    def settings(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


# EngineConfig field -> where transformers' DiffusionGemmaGenerationConfig keeps it (generation_config.json).
GENERATION_FIELDS = {
    "max_denoising_steps": "max_denoising_steps",
    "t_min": "t_min",
    "t_max": "t_max",
    "stability_threshold": "stability_threshold",
    "confidence_threshold": "confidence_threshold",
    "entropy_bound": "sampler_config.entropy_bound",
}
# The canvas length is the model's (DiffusionGemmaConfig.canvas_length, config.json), not a generation setting.
MODEL_FIELDS = {"canvas_length": "canvas_length"}
EXPLICIT, CHECKPOINT_GENERATION, CHECKPOINT_MODEL, DEFAULT = (
    "explicit",
    "generation_config.json",
    "config.json",
    "default",
)


@dataclass(frozen=True)
class ResolvedEngineConfig:
    """An EngineConfig and, per sampler setting, where its value came from (EXPLICIT, CHECKPOINT_*, DEFAULT)."""

    config: EngineConfig
    sources: dict[str, str]

    def describe(self) -> str:
        return ", ".join(f"{name}={getattr(self.config, name)} ({source})" for name, source in self.sources.items())


EngineSettings = EngineConfig | EngineOverrides | Mapping[str, Any] | None


def explicit_settings(config: EngineSettings) -> dict[str, Any]:
    """The settings a caller chose. EngineOverrides: its given fields; a mapping is taken as it is; of a whole
    EngineConfig, the fields that differ from EngineConfig()'s defaults (so a value equal to the default cannot
    override a checkpoint's: pass overrides or a mapping for that)."""
    if config is None:
        return {}
    if isinstance(config, EngineOverrides):
        return config.settings()
    if isinstance(config, Mapping):
        return dict(config)
    default = EngineConfig()
    return {
        f.name: getattr(config, f.name) for f in fields(config) if getattr(config, f.name) != getattr(default, f.name)
    }


def _lookup(source: object, dotted: str) -> Any:
    value: Any = source
    for part in dotted.split("."):
        if value is None:
            return None
        value = value.get(part) if isinstance(value, Mapping) else getattr(value, part, None)
    return value


def resolve_engine_config(
    generation_config: object, model_config: object, explicit: EngineSettings = None
) -> ResolvedEngineConfig:
    """EngineConfig from, in priority order: `explicit` settings, the checkpoint's generation config
    (`model.generation_config`, read from generation_config.json) and model config, then EngineConfig's defaults
    (transformers' generation defaults). A combination that does not validate is an InfillError naming the
    sources."""
    chosen = explicit_settings(explicit)
    unknown = set(chosen) - {f.name for f in fields(EngineConfig)}
    if unknown:
        raise InfillError(f"unknown engine settings: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for origin, table, where in (
        (CHECKPOINT_GENERATION, GENERATION_FIELDS, generation_config),
        (CHECKPOINT_MODEL, MODEL_FIELDS, model_config),
    ):
        for name, dotted in table.items():
            if name in chosen:
                values[name], sources[name] = chosen[name], EXPLICIT
                continue
            found = _lookup(where, dotted)
            if found is not None:
                values[name], sources[name] = found, origin
            else:
                sources[name] = DEFAULT
    values.update({k: v for k, v in chosen.items() if k not in sources})
    try:
        config = replace(EngineConfig(), **values)
    except (InfillError, TypeError) as exc:
        raise InfillError(f"{exc} (settings from: {sources})") from exc
    return ResolvedEngineConfig(config, sources)
