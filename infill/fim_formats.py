"""The fill-in-the-middle formats of code models, by their marker texts: one table, read both ways. The gateway
(infill/gateway/fim_prompts.py) splits a prompt a FIM client built back into the text before and after the gap; the
offline backend (infill/backends/offline/fim.py) finds a GGUF's FIM tokens in its vocabulary by these texts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FimFormat:
    """One family's markers. `order` is "psm" (prefix, suffix, middle: the usual) or "spm" (suffix first).
    `closing` is the marker the prompt ends with ("" when the prompt ends with the last text, as Codestral's).
    `pad` is a space the family's template puts inside its markers (CodeLlama's `<PRE> {prefix} <SUF>`)."""

    name: str
    prefix: str
    suffix: str
    closing: str
    order: str = "psm"
    pad: bool = False


# Every format Zed's crates/edit_prediction/src/fim.rs emits (its default is StarCoder's), plus SantaCoder's
# hyphenated spelling. Longer markers first where one could be read inside another: none overlap today.
FORMATS: tuple[FimFormat, ...] = (
    FimFormat("qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # also CodeGemma's
    FimFormat("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    FimFormat("santacoder", "<fim-prefix>", "<fim-suffix>", "<fim-middle>"),
    FimFormat("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    FimFormat("codellama", "<PRE>", "<SUF>", "<MID>", pad=True),
    FimFormat("codestral", "[PREFIX]", "[SUFFIX]", "", order="spm"),
    FimFormat("glm", "<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>"),
)
