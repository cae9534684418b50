"""llama.cpp-style `/infill` beside `/v1/completions` on the same holes, through the real gateway over the real
offline default (Gemma 3 270M on llama.cpp): the same text before and after each cursor, sent once as llama.vim
sends it (`input_prefix` = the lines before the cursor's line, `prompt` = that line up to the cursor,
`input_suffix`) and once as a generic FIM client does (`prompt` + `suffix`), alternating which goes first.

Per hole, three requests per endpoint are timed on the client: a fresh prompt (the model's KV sequence holds
another file's text), the same request again (its prompt cached: the endpoint's own overhead shows), and for
/infill the `n_predict: 0` warm-up llama.vim sends. Holes: the middle of a line in each of this repository's
modules (seeded), at most --holes.

LAST line: one JSON object of figures (milliseconds; machine; the answers that differed between the endpoints).
Usage: python benchmarks/infill_endpoint.py [--holes 12] [--seed 25] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infill.gateway.server import make_server  # noqa: E402
from infill.pipeline import Pipeline  # noqa: E402
from infill.stats import percentile  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def machine() -> dict:
    flags = ""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split(":", 1)[1]
        model = next(line for line in open("/proc/cpuinfo") if line.startswith("model name")).split(":", 1)[1]
    except (OSError, StopIteration):
        model = "unknown"
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
    return {
        "cpu": model.strip(),
        "cores": os.cpu_count(),
        "cpu_flags": [f for f in wanted if f in flags.split()],
        "contended": "other engineers' tests ran on the same cores",
    }


def holes(count: int, seed: int) -> list[tuple[str, str, str, str]]:
    """(file, text before the cursor's line, the line up to the cursor, the text after the cursor)."""
    rng = random.Random(seed)
    files = sorted(p for p in (REPO / "infill").rglob("*.py") if p.stat().st_size > 2000)
    rng.shuffle(files)
    out = []
    for path in files[:count]:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        candidates = [i for i, line in enumerate(lines) if len(line.strip()) > 20 and i > 10]
        i = rng.choice(candidates)
        line = lines[i].rstrip("\n")
        col = len(line) - len(line.lstrip()) + rng.randrange(4, len(line.strip()) // 2 + 5)
        col = min(col, len(line) - 1)
        after = line[col:] + "\n" + "".join(lines[i + 1 :])
        out.append((str(path.relative_to(REPO)), "".join(lines[:i]), line[:col], after))
    return out


def timed(http: httpx.Client, path: str, body: dict) -> tuple[float, dict]:
    started = time.perf_counter()
    response = http.post(path, json=body)
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return elapsed, response.json()


def summary(values: list[float]) -> dict:
    return {"p50": round(percentile(values, 50), 1), "p95": round(percentile(values, 95), 1), "n": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--holes", type=int, default=12)
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()

    from infill.backends.offline.backend import load_default_backend

    backend = load_default_backend()
    server = make_server(Pipeline(backend), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    times: dict[str, list[float]] = {
        k: [] for k in ("v1_fresh", "infill_fresh", "v1_again", "infill_again", "infill_warm_up")
    }
    differed = []
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            flush = {"prompt": "# another file entirely\nimport os\n", "suffix": "", "max_tokens": 1}
            for n, (name, before, line, after) in enumerate(holes(args.holes, args.seed)):
                v1 = {"prompt": before + line, "suffix": after, "max_tokens": args.max_tokens}
                infill = {
                    "input_prefix": before,
                    "prompt": line,
                    "input_suffix": after,
                    "input_extra": [],
                    "n_predict": args.max_tokens,
                    "cache_prompt": True,
                    "samplers": [],
                    "stream": False,
                }
                order = [("v1", "/v1/completions", v1), ("infill", "/infill", infill)]
                texts = {}
                for label, path, body in order if n % 2 == 0 else order[::-1]:
                    timed(http, "/v1/completions", flush)  # the sequence now holds other text
                    ms, answer = timed(http, path, body)
                    times[f"{label}_fresh"].append(ms)
                    ms, answer = timed(http, path, body)
                    times[f"{label}_again"].append(ms)
                    texts[label] = answer["choices"][0]["text"] if label == "v1" else answer["content"]
                timed(http, "/v1/completions", flush)
                ms, _ = timed(http, "/infill", {**infill, "n_predict": 0})
                times["infill_warm_up"].append(ms)
                if texts["v1"] != texts["infill"]:
                    differed.append(name)
                print(
                    f"{name}: v1 {times['v1_fresh'][-1]:.0f}/{times['v1_again'][-1]:.0f} ms, infill "
                    f"{times['infill_fresh'][-1]:.0f}/{times['infill_again'][-1]:.0f} ms, warm-up "
                    f"{times['infill_warm_up'][-1]:.0f} ms, same text: {texts['v1'] == texts['infill']}"
                )
    finally:
        server.shutdown()
        server.server_close()
        backend.close()
    figures = {f"{k}_ms": summary(v) for k, v in times.items()}
    print(
        json.dumps(
            {
                **figures,
                "holes": len(times["v1_fresh"]),
                "answers_differed": differed,
                "model": backend.info.model,
                "max_tokens": args.max_tokens,
                "machine": machine(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
