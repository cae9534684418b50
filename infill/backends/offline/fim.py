"""A GGUF's fill-in-the-middle tokens, read from the file, and the prompt in its own FIM format.

A model trained for FIM (Qwen2.5-Coder, StarCoder2, CodeLlama, CodeGemma, ...) sees the text after the gap as well
as the text before it: `<prefix-token> before <suffix-token> after <middle-token>`, then writes the middle and ends
it with an end-of-fill token (EOT, its FIM pad or EOS). Which tokens those are comes from the file: the GGUF
metadata keys `tokenizer.ggml.fim_pre_token_id` (and `_suf_`, `_mid_`, `_pad_`, `_rep_`, `_sep_`) that converters
write, else the known token texts of each family found in its vocabulary as special tokens. A model with neither
has no FIM: the backend then continues the prefix, as it does for Gemma 3 270M.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infill.fim_formats import FORMATS

METADATA_KEY = "tokenizer.ggml.{}_token_id"
# The keys converters wrote before the fim_* ones (CodeLlama GGUFs of 2023 carry these).
_LEGACY_PARTS = {"pre": "prefix", "suf": "suffix", "mid": "middle"}
# Per FIM family (named as infill/fim_formats.py names its marker texts): the texts of its other tokens.
# pad ends a fill (Qwen's and StarCoder's models write it after the middle); rep names the repository and sep starts
# a file, for prompts that carry other files ahead of the current one.
_FAMILY_TOKENS: dict[str, dict[str, str]] = {
    "qwen": {"pad": "<|fim_pad|>", "rep": "<|repo_name|>", "sep": "<|file_sep|>"},
    "starcoder": {"pad": "<fim_pad>", "rep": "<reponame>", "sep": "<file_sep>"},
    "codellama": {"pad": "<EOT>"},
}


@dataclass(frozen=True)
class FimTokens:
    """The token ids of one model's FIM format (prefix-suffix-middle)."""

    prefix: int
    suffix: int
    middle: int
    ends: frozenset[int]  # tokens that end a fill besides the model's end-of-generation ones (pad, file separator)
    file_separator: int | None  # starts another file's text ahead of the current one (None: the model has none)
    repository: int | None  # names the repository ahead of the files (None: the model has none)
    source: str  # "metadata" (the GGUF's keys) or "token texts" (found in the vocabulary)


def read_fim_tokens(
    metadata: Callable[[str], str | None], special_token: Callable[[str], int | None]
) -> FimTokens | None:
    """The FIM tokens of a model: from its metadata (`metadata(key)`: the value's text, None when absent), else
    from the known texts of one family (`special_token(text)`: the id of the special token with that text, None
    when there is none); None when the model has no complete prefix-suffix-middle triple."""
    keys = {
        part: _token_id(metadata(METADATA_KEY.format(f"fim_{part}")))
        for part in ("pre", "suf", "mid", "pad", "rep", "sep")
    }
    for part, legacy in _LEGACY_PARTS.items():
        if keys[part] is None:
            keys[part] = _token_id(metadata(METADATA_KEY.format(legacy)))
    pre, suf, mid = keys["pre"], keys["suf"], keys["mid"]
    if pre is not None and suf is not None and mid is not None:
        return _tokens(pre, suf, mid, keys["pad"], keys["rep"], keys["sep"], "metadata")
    for fmt in FORMATS:
        if fmt.order != "psm" or not fmt.closing:
            continue  # (suffix-first formats and those without a middle marker are not read from a vocabulary)
        pre, suf, mid = (_find(special_token, text) for text in (fmt.prefix, fmt.suffix, fmt.closing))
        if pre is None or suf is None or mid is None:
            continue
        others = {part: _find(special_token, text) for part, text in _FAMILY_TOKENS.get(fmt.name, {}).items()}
        return _tokens(pre, suf, mid, others.get("pad"), others.get("rep"), others.get("sep"), "token texts")
    return None


def _find(special_token: Callable[[str], int | None], text: str) -> int | None:
    """The special token of `text`, or of "▁" + `text` (SentencePiece vocabularies spell a marker after a space with
    its "▁": CodeLlama's "▁<PRE>")."""
    found = special_token(text)
    return found if found is not None else special_token("\u2581" + text)


def _tokens(pre: int, suf: int, mid: int, pad: int | None, rep: int | None, sep: int | None, source: str) -> FimTokens:
    return FimTokens(
        prefix=pre,
        suffix=suf,
        middle=mid,
        ends=frozenset(t for t in (pad, sep, rep) if t is not None),
        file_separator=sep,
        repository=rep,
        source=source,
    )


def _token_id(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return None
    return number if number >= 0 else None


def fim_head(fim: FimTokens, other_files: list[int], bos: list[int]) -> list[int]:
    """What stands before the prefix's text: BOS where the model wants one, other files' code (behind the model's
    file separator, where it has one), then the prefix token."""
    head = list(bos)
    if other_files:
        head += ([fim.file_separator] if fim.file_separator is not None else []) + other_files
        if fim.file_separator is not None:
            head.append(fim.file_separator)  # the current file starts here
    return head + [fim.prefix]


def fim_tail(fim: FimTokens, suffix: list[int]) -> list[int]:
    """What follows the prefix's text: the suffix token, the text after the gap, the middle token."""
    return [fim.suffix] + suffix + [fim.middle]
