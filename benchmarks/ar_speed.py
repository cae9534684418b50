"""Time per single-line fill of the offline default (Gemma 3 270M) on a keystroke, settings A vs B side by side.

Holes are those of benchmarks/ar_quality.py (seeded, single-line statements of installed packages). For each
hole the prefix minus its last `--typed` characters is filled once (untimed: it puts the document's prefix KV in
place, as the previous keystroke would), then each of the last characters is typed and filled once per mode, the
modes alternating in order so that a shared machine's load hits them alike. Each mode keeps its own document, so
both see the same prefix-KV reuse. Reported per mode: fill p50/p95, the prefill (encode) and decode parts, decoded
tokens per forward, and the share of fills identical to the first mode's. `--profile` adds where one fill's time
goes (tokenising, the prefill of the new tail, one decoding forward split into the transformer body and the
262,144-row output head, choosing the token, the stop rules), and the cost of verifying 9 tokens in one forward.

    python benchmarks/ar_speed.py --n 20 --modes plain:draft_tokens=0 drafts:  # last line: one JSON object
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ar_quality import cut_holes  # noqa: E402
from infill.backends.gemma import ARSettings, load_default_backend  # noqa: E402
from infill.stats import percentile  # noqa: E402
from infill.types import InfillRequest  # noqa: E402


def cpu_flags() -> list[str]:
    try:
        words = set(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split())
    except OSError:
        return []
    return sorted(words & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma"})


def parse_mode(text: str) -> tuple[str, dict]:
    """`name:key=value,key=value` → (name, ARSettings overrides)."""
    name, _, rest = text.partition(":")
    kinds = {f.name: f.type for f in fields(ARSettings)}
    overrides = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key not in kinds:
            raise SystemExit(f"unknown setting {key!r} in mode {text!r}")
        overrides[key] = None if value == "None" else (value == "true" if value in ("true", "false") else int(value))
    return name, overrides


def keystrokes(backend, holes, modes: list[tuple[str, dict]], typed: int, max_tokens: int) -> dict:
    base = backend.settings
    rows: dict[str, list[dict]] = {name: [] for name, _ in modes}
    for index, hole in enumerate(holes):
        for k in range(typed, -1, -1):
            prefix = hole.prefix[:len(hole.prefix) - k]
            order = modes if (index + k) % 2 == 0 else modes[::-1]
            for name, overrides in order:
                backend.settings = replace(base, **overrides)
                result = backend.infill(InfillRequest(prefix=prefix, suffix=hole.suffix, single_line=True,
                                                      language="python", max_middle_tokens=max_tokens,
                                                      document_id=f"{index}:{name}"))
                if k < typed:
                    rows[name].append({"total": result.timings.total_ms, "encode": result.timings.encode_ms,
                                       "decode": result.timings.denoise_ms, "steps": result.steps,
                                       "per_forward": result.tokens_per_forward, "middle": result.middle})
    backend.settings = base
    first = rows[modes[0][0]]
    out = {}
    for name, series in rows.items():
        steps = sum(r["steps"] for r in series)
        out[name] = {"fill_p50_ms": percentile([r["total"] for r in series], 50),
                     "fill_p95_ms": percentile([r["total"] for r in series], 95),
                     "encode_p50_ms": percentile([r["encode"] for r in series], 50),
                     "decode_ms_per_token": sum(r["decode"] for r in series) / max(1, steps),
                     "tokens_per_forward": statistics.mean(r["per_forward"] for r in series),
                     "same_fill_as_" + modes[0][0]: statistics.mean(r["middle"] == f["middle"]
                                                                    for r, f in zip(series, first))}
    out["fills_per_mode"] = len(first)
    return out


def profile(backend, holes, max_steps: int = 8) -> dict:
    """Median ms of each part of a keystroke's fill, measured on the backend's own model and tokenizer."""
    import torch
    from transformers import DynamicCache

    from infill.backends.gemma_stops import cut_fill, gap_shape
    from infill.cache.tokens import fit_prompt

    model, tokenizer = backend._model, backend._tokenizer
    parts: dict[str, list[float]] = {k: [] for k in ("tokenise_and_fit", "prefill_tail_3_tokens", "body_1_token",
                                                     "head_1_token", "choose_token", "stop_rules",
                                                     "body_9_tokens", "head_9_tokens")}

    def timed(key, fn):
        started = time.perf_counter()
        value = fn()
        parts[key].append((time.perf_counter() - started) * 1000)
        return value

    for hole in holes:
        backend.tokens.chunks(hole.prefix[:-1])  # the previous keystroke memoised every other line
        ids = timed("tokenise_and_fit", lambda: fit_prompt(backend.tokens.chunks(hole.prefix), [backend._bos],
                                                            backend.settings.max_prompt_tokens).ids)
        shape = gap_shape(hole.prefix, hole.suffix, True, "python")
        cache = DynamicCache()
        with torch.inference_mode():
            model.model(input_ids=torch.tensor([ids[:-3]]), cache=cache, use_cache=True)
            timed("prefill_tail_3_tokens", lambda: model.model(input_ids=torch.tensor([ids[-3:]]), cache=cache,
                                                               use_cache=True))
            generated, last = [], ids[-1]
            for _ in range(max_steps):
                hidden = timed("body_1_token", lambda: model.model(input_ids=torch.tensor([[last]]), cache=cache,
                                                                   use_cache=True).last_hidden_state[:, -1])
                logits = timed("head_1_token", lambda: model.lm_head(hidden))
                last = timed("choose_token", lambda: backend._pick(logits)[0][0])
                generated.append(last)
                timed("stop_rules", lambda: cut_fill(tokenizer.decode(generated), shape))
            hidden = timed("body_9_tokens", lambda: model.model(input_ids=torch.tensor([[last] * 9]), cache=cache,
                                                                use_cache=True).last_hidden_state)
            timed("head_9_tokens", lambda: model.lm_head(hidden))
    medians = {key: statistics.median(values) for key, values in parts.items()}
    one = medians["body_1_token"] + medians["head_1_token"] + medians["choose_token"] + medians["stop_rules"]
    medians["head_share_of_a_decoding_step"] = medians["head_1_token"] / one
    medians["verify_9_vs_1_forward"] = ((medians["body_9_tokens"] + medians["head_9_tokens"])
                                        / (medians["body_1_token"] + medians["head_1_token"]))
    return medians


def dtype_profile(backend, holes, steps: int = 6) -> dict:
    """Median ms of one decoding forward of 1, 4 and 9 tokens and of a 256-token prefill chunk, for each weight
    format the offline default loads (int8, bf16, float32), alternating formats on the same tokens."""
    import torch
    from transformers import DynamicCache

    models = {name: load_default_backend(dtype=name)._model for name in ("int8", "bfloat16", "float32")}
    times: dict[str, list[float]] = {f"{name}_{what}": [] for name in models
                                     for what in ("forward_1", "forward_4", "forward_9", "prefill_256")}

    def timed(key: str, model, ids: list[int], cache) -> None:
        started = time.perf_counter()
        model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=len(ids) if
              len(ids) < 16 else 1)
        times[key].append((time.perf_counter() - started) * 1000)

    with torch.inference_mode():
        for hole in holes:
            ids = backend.tokens.encode(hole.prefix)[-300:]
            for step in range(steps):
                order = list(models.items()) if step % 2 else list(reversed(models.items()))
                for name, model in order:
                    cache = DynamicCache()
                    timed(f"{name}_prefill_256", model, ids[:256], cache)
                    for rows in (1, 4, 9):
                        timed(f"{name}_forward_{rows}", model, ids[256:256 + rows], cache)
                        cache.crop(-rows)
    return {f"{key}_ms": statistics.median(values) for key, values in times.items() if values}


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="holes")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--packages", default="httpx,pygls,gguf")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--typed", type=int, default=2, help="characters typed per hole (timed keystrokes)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--dtype", default=None, help="auto (int8 weights on a CPU with native bf16, else bf16), int8, "
                                                     "bfloat16 or float32")
    parser.add_argument("--modes", nargs="+", default=["plain:draft_tokens=0", "drafts:"],
                        help="name:setting=value,... per mode; the first is the reference")
    parser.add_argument("--profile", action="store_true", help="also time the parts of one fill")
    parser.add_argument("--dtypes", action="store_true",
                        help="also time forwards of 1, 4, 9 tokens and a 256-token prefill in int8, bf16 and float32")
    args = parser.parse_args(argv)

    modes = [parse_mode(m) for m in args.modes]
    started = time.monotonic()
    backend = load_default_backend(dtype=args.dtype, settings=ARSettings(num_threads=args.threads))
    import torch

    holes = cut_holes(args.packages.split(","), args.n, args.seed)
    figures: dict = {"model": backend.info.label, "dtype": backend.info.dtype, "torch_threads": torch.get_num_threads(),
                     "cores": os.cpu_count(), "cpu_flags": cpu_flags(), "load_average_start": os.getloadavg()[0],
                     "holes": len(holes), "typed": args.typed, "modes": dict(modes)}
    if args.profile:
        figures["profile_ms"] = profile(backend, holes[: min(8, len(holes))])
    if args.dtypes:
        figures["dtype_forward_ms"] = dtype_profile(backend, holes[: min(4, len(holes))])
    figures.update(keystrokes(backend, holes, modes, args.typed, args.max_tokens))
    figures["load_average_end"] = os.getloadavg()[0]
    figures["wall_s"] = time.monotonic() - started
    backend.close()
    print(json.dumps(_rounded(figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
