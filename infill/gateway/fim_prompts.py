"""Fill-in-the-middle prompts that a client built itself out of a model's FIM tokens, split back into the text
before and after the gap.

Zed's OpenAI-compatible edit-prediction provider (and other generic FIM clients) send `/v1/completions` a
`prompt` such as `<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>` and no `suffix` field, in the format it
infers from the model's name. infill-ls builds its own prompt for its own model, so the gateway reads the
client's markers, fills the gap between the two texts like any `suffix` request, and answers with the middle only.

A prompt is read as a FIM prompt only when it has the whole shape of one format (the opening marker first, the
closing marker last, the separating marker between); anything else stays a plain prompt, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from infill.fim_formats import FORMATS, FimFormat


@dataclass(frozen=True)
class FimPrompt:
    prefix: str
    suffix: str
    format: str  # FimFormat.name


def split_fim_prompt(prompt: str) -> FimPrompt | None:
    """The prefix and suffix of a FIM-token prompt in one of FORMATS, or None when `prompt` is not one."""
    for fmt in FORMATS:
        parts = _split(prompt, fmt)
        if parts is not None:
            return FimPrompt(parts[0], parts[1], fmt.name)
    return None


def _split(prompt: str, fmt: FimFormat) -> tuple[str, str] | None:
    first, second = (fmt.prefix, fmt.suffix) if fmt.order == "psm" else (fmt.suffix, fmt.prefix)
    if not prompt.startswith(first) or not prompt.endswith(fmt.closing):
        return None
    body = prompt[len(first) : len(prompt) - len(fmt.closing)]
    cut = body.find(second)  # (a literal marker inside the code is ambiguous; the first one separates)
    if cut < 0:
        return None
    one, two = body[:cut], body[cut + len(second) :]
    if fmt.pad:  # `<PRE> {prefix} <SUF>{suffix} <MID>`: the template's spaces are not the code's
        one = _drop_edge_spaces(one)
        two = two[:-1] if two.endswith(" ") else two
    return (one, two) if fmt.order == "psm" else (two, one)


def _drop_edge_spaces(text: str) -> str:
    text = text[1:] if text.startswith(" ") else text
    return text[:-1] if text.endswith(" ") else text
