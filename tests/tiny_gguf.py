"""A tiny random llama-architecture GGUF written with the `gguf` package, for tests of a user's GGUF on llama.cpp
(infill/backends/offline/user_model.py): a SentencePiece vocabulary of byte-fallback tokens, printable characters
and, as asked, FIM tokens, named by the metadata keys or only by their texts.

`favourite` makes the model write one token whatever the context: every token's embedding carries a large constant
in its first dimension and the layers add little to it, so the last hidden state points that way, and only the
favourite's output row reads that dimension. The other rows are small and random.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

EMBED, HEADS, FFN, LAYERS = 64, 4, 128, 2
QWEN_FIM = {
    "pre": "<|fim_prefix|>",
    "suf": "<|fim_suffix|>",
    "mid": "<|fim_middle|>",
    "pad": "<|fim_pad|>",
    "rep": "<|repo_name|>",
    "sep": "<|file_sep|>",
}


@dataclass
class TinyGGUF:
    path: Path
    ids: dict[str, int]  # token text -> id, for the tokens a test names
    fim_ids: dict[str, int] = field(default_factory=dict)  # "pre", "suf", ... -> id


def write_tiny_gguf(
    path: Path,
    *,
    name: str = "Tiny FIM Coder",
    fim_texts: dict[str, str] | None = None,
    fim_in_metadata: bool = False,
    favourite: str | None = None,
    architecture: str = "llama",
    seed: int = 0,
) -> TinyGGUF:
    """Write the model to `path`. `fim_texts`: the FIM tokens' texts by part ("pre", "suf", "mid", "pad", "rep",
    "sep"; None: no FIM tokens); `fim_in_metadata`: their ids in the `tokenizer.ggml.fim_*_token_id` keys too."""
    import gguf

    tokens: list[str] = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    tokens += ["▁"] + [chr(c) for c in range(0x21, 0x7F)] + ["▁=", "▁return", "ret", "urn"]
    types += [gguf.TokenType.NORMAL] * (len(tokens) - len(types))
    fim_ids: dict[str, int] = {}
    for part, text in (fim_texts or {}).items():
        fim_ids[part] = len(tokens)
        tokens.append(text)
        types.append(gguf.TokenType.CONTROL)
    ids = {text: i for i, text in enumerate(tokens)}
    scores = [0.0 if t != gguf.TokenType.NORMAL else -float(len(text) == 1) for text, t in zip(tokens, types)]

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(name)
    writer.add_context_length(8192)
    writer.add_embedding_length(EMBED)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(EMBED // HEADS)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types([int(t) for t in types])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    if fim_in_metadata:
        for part, token in fim_ids.items():
            writer.add_uint32(f"tokenizer.ggml.fim_{part}_token_id", token)
    for tensor_name, values in _weights(len(tokens), ids.get(favourite or "", None), seed).items():
        writer.add_tensor(tensor_name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return TinyGGUF(path, ids, fim_ids)


def _weights(vocab: int, favourite: int | None, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def small(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    embeddings = small(vocab, EMBED, scale=0.5)
    output = small(vocab, EMBED, scale=0.5)
    if favourite is not None:
        embeddings[:, 0] = 50.0  # the residual stream points along dimension 0 whatever the token
        output[:, 0] = 0.0
        output[favourite, 0] = 10.0  # and only the favourite's row reads it
    weights = {
        "token_embd.weight": embeddings,
        "output_norm.weight": np.ones(EMBED, dtype=np.float32),
        "output.weight": output,
    }
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        weights |= {
            f"{block}.attn_norm.weight": np.ones(EMBED, dtype=np.float32),
            f"{block}.attn_q.weight": small(EMBED, EMBED),
            f"{block}.attn_k.weight": small(EMBED, EMBED),
            f"{block}.attn_v.weight": small(EMBED, EMBED),
            f"{block}.attn_output.weight": small(EMBED, EMBED),
            f"{block}.ffn_norm.weight": np.ones(EMBED, dtype=np.float32),
            f"{block}.ffn_gate.weight": small(FFN, EMBED),
            f"{block}.ffn_up.weight": small(FFN, EMBED),
            f"{block}.ffn_down.weight": small(EMBED, FFN),
        }
    return weights
