"""Does code from other open files help? Paired, on holes whose answer needs a name from another file.

A cross-file hole is a single-line hole (the rest of a line from a cursor, as when typing) whose expected text uses a
name that one or two other Python files of the same package define (`def`, `class` or an assignment; not a builtin
or an attribute of a builtin type or of typing) and that the text the
model sees of the current file does not hold (not in the last PREFIX_SEEN characters before the cursor nor the first
SUFFIX_SEEN after it; the current file defines it nowhere). The cursor sits just before that name (after `.`, `(`,
`= `...), where a user typing waits for the name. The editor has open, besides the current file, the defining file and
up to DISTRACTORS other files of the package, in a seeded random order: the selection must find the right chunk.

Each hole goes through `Pipeline.complete` twice, as the LSP server asks (language given, inline guard): without
other open files, and with them (`CompletionRequest.related`). Reported per arm: shown, exact, writes the name, edit
similarity, valid of shown, with 95% intervals; paired counts (exact only with / only without); how often the chosen
lines hold the name; the selection's own cost per request (p50/p95, the keystroke path's added CPU); the prompt
tokens it adds; p50/p95 of the whole fill.

Sets as in fill_quality.py: `--set heldout` (its packages and seed; choose nothing on them), `--set dev` (tuning).

    python benchmarks/cross_file.py [--set heldout|dev] [--n 60] [--seed N (dev)] [--per-hole FILE.jsonl]
"""

from __future__ import annotations

import argparse
import builtins
import io
import json
import keyword
import os
import random
import re
import sys
import time
import tokenize
import typing
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fill_quality import (
    DEV_PACKAGES,
    HELD_OUT_PACKAGES,
    HELD_OUT_SEED,
    middle_of,  # noqa: E402
    package_files,
)

from infill.backends.offline.backend import load_default_backend  # noqa: E402
from infill.context.related import OpenDocument, RelatedFiles  # noqa: E402
from infill.metrics import edit_similarity, exact_match  # noqa: E402
from infill.pilot.syntax import syntax_valid  # noqa: E402
from infill.pipeline import CompletionRequest, Pipeline, PipelineSettings  # noqa: E402
from infill.stats import percentile  # noqa: E402
from infill.testing.benchmark_figures import (  # noqa: E402
    kernel_flags,  # noqa: E402
    mean_interval,
    wilson_interval,
)
from infill.types import FillControl  # noqa: E402
from server.budget import GUARD_CAP_MS  # noqa: E402
from server.settings import Settings  # noqa: E402

PREFIX_SEEN = 1500  # about the offline default's fresh prompt (384 tokens)
SUFFIX_SEEN = 1000
DISTRACTORS = 3
MAX_OWNERS = 2  # a name more files define (a common method name) is no one file's
_DEFINED = re.compile(
    r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)|"
    r"^\s+self\.([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class CrossHole:
    id: str
    path: str
    line: int
    prefix: str
    middle: str
    suffix: str
    name: str  # the other file's name the middle needs
    defined_in: str
    open_files: tuple[str, ...]  # other open files (paths), in the editor's order


# Names any Python code may use without another file: builtins and the attributes of builtin types and typing.
_EVERYWHERE = frozenset(
    n
    for source in (builtins, str, bytes, list, dict, set, tuple, int, float, object, typing, io.IOBase, Exception)
    for n in dir(source)
)


def definitions(text: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in _DEFINED.finditer(text)}


def code_names(text: str) -> dict[int, list[tuple[int, str]]]:
    """Names the code uses (not in strings or comments), by 1-based line: (column, name)."""
    found: dict[int, list[tuple[int, str]]] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
                found.setdefault(tok.start[0], []).append((tok.start[1], tok.string))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return {}
    return found


def cut_cross_holes(files, n: int, seed: int, control: bool = False) -> list[CrossHole]:
    """Holes whose name another file of the package defines; `control`: holes cut the same way before a name no
    other file defines and the text the model sees holds (a name from the current file), with as many other files
    of the package open: what code from other files must not take away."""
    rng = random.Random(seed)
    by_package: dict[str, list] = {}
    for f in files.files:
        by_package.setdefault(f.path.split("/")[0], []).append(f)
    defined = {f.path: definitions(f.text) for f in files.files}
    candidates = []
    for _package, members in sorted(by_package.items()):
        for f in members:
            own, names = defined[f.path], code_names(f.text)
            offset = 0
            for number, line in enumerate(f.text.splitlines(keepends=True), 1):
                start, offset = offset, offset + len(line)
                stripped = line.strip()
                if len(stripped) < 12 or stripped.startswith(("import ", "from ", "def ", "class ", "@")):
                    continue
                for column, name in names.get(number, []):
                    if (
                        len(name) < 4
                        or (name in own and not control)
                        or name in _EVERYWHERE
                        or column <= len(line) - len(line.lstrip())
                    ):
                        continue
                    owners = sorted(g.path for g in members if g is not f and name in defined[g.path])
                    seen = f.text[max(0, start - PREFIX_SEEN) : start] + f.text[offset : offset + SUFFIX_SEEN]
                    if control:
                        if owners or name not in seen or len(members) <= DISTRACTORS + 1:
                            continue
                    elif not owners or len(owners) > MAX_OWNERS or name in seen or name in line[:column]:
                        continue
                    candidates.append((f, number, start, column, name, owners, members))
                    break
    rng.shuffle(candidates)
    holes, used = [], set()
    for f, number, start, name_at, name, owners, members in candidates:
        if len(holes) == n:
            break
        if (f.path, number) in used:
            continue
        used.add((f.path, number))
        line = f.text[start : f.text.find("\n", start) if "\n" in f.text[start:] else len(f.text)]
        cut = start + name_at
        end = start + len(line)
        owner = rng.choice(owners) if owners else ""
        others = [g.path for g in members if g.path not in (f.path, owner)]
        opened = ([owner] if owner else []) + rng.sample(others, min(DISTRACTORS + (not owner), len(others)))
        rng.shuffle(opened)
        holes.append(
            CrossHole(
                f"x{len(holes)}",
                f.path,
                number,
                f.text[:cut],
                f.text[cut:end],
                f.text[end:],
                name,
                owner,
                tuple(opened),
            )
        )
    return holes


def ask(pipeline: Pipeline, hole: CrossHole, texts: dict[str, str], related: bool, arm: str) -> dict:
    text, start = hole.prefix + hole.suffix, len(hole.prefix)
    others = tuple(OpenDocument(path, path, texts[path]) for path in hole.open_files) if related else ()
    request = CompletionRequest(
        text=text,
        start=start,
        end=start,
        mode="inline",
        language="python",
        document_id=f"x-{arm}:{hole.id}",
        name=hole.path,
        related=others,
    )
    t0 = time.perf_counter()
    out = pipeline.complete(request, FillControl(deadline=time.monotonic() + GUARD_CAP_MS / 1000))
    ms = (time.perf_counter() - t0) * 1000
    fill = out.fills[0] if out.fills else None
    shown = middle_of(text, fill.start, fill.end, fill.text, hole) if fill and fill.text.strip() else ""
    original = hole.prefix + hole.middle + hole.suffix
    return {
        "shown": bool(shown.strip()),
        "exact": bool(shown.strip()) and exact_match(shown, hole.middle),
        "similarity": edit_similarity(shown, hole.middle) if shown.strip() else 0.0,
        "valid": syntax_valid("python", original, hole.prefix + shown + hole.suffix) if shown.strip() else None,
        "ms": round(ms, 1),
        "prompt_tokens": out.result.prompt_tokens if out.result else 0,
        "has_name": hole.name in shown,
        "fill": shown,
    }


def selection(related: RelatedFiles, hole: CrossHole, texts: dict[str, str]) -> tuple[float, bool]:
    """ms to choose the lines once the other files are outlined (what every keystroke pays), and whether the
    chosen lines hold the name the hole needs."""
    text, start = hole.prefix + hole.suffix, len(hole.prefix)
    others = tuple(OpenDocument(path, path, texts[path]) for path in hole.open_files)
    related.select(others, text, start, start, "python", name=hole.path)  # outlines them (once per file text)
    t0 = time.perf_counter()
    extra = related.select(others, text, start, start, "python", name=hole.path)
    return (time.perf_counter() - t0) * 1000, hole.name in extra


def _share(count: int, n: int) -> dict:
    low, high = wilson_interval(count, n)
    return {"value": round(count / n, 4) if n else None, "ci95": [round(low, 4), round(high, 4)], "count": count}


def summarise(records: list[dict]) -> dict:
    n = len(records)
    shown = [r for r in records if r["shown"]]
    interval = mean_interval([r["similarity"] for r in records])
    times = [r["ms"] for r in records]
    return {
        "shown": _share(len(shown), n),
        "exact": _share(sum(r["exact"] for r in records), n),
        "writes_the_name": _share(sum(r["has_name"] for r in records), n),
        "edit_similarity": {
            "value": round(sum(r["similarity"] for r in records) / n, 4) if n else None,
            "ci95": [round(x, 4) for x in interval] if interval else None,
        },
        "valid_of_shown": _share(sum(1 for r in shown if r["valid"]), len(shown)),
        "prompt_tokens_p50": percentile([r["prompt_tokens"] for r in records], 50),
        "p50_ms": round(percentile(times, 50) or 0),
        "p95_ms": round(percentile(times, 95) or 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=("heldout", "dev"), default="heldout")
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--seed", type=int, default=None, help="dev set only (the held-out seed is fixed)")
    parser.add_argument("--per-hole", default=None)
    parser.add_argument(
        "--control",
        action="store_true",
        help="holes before a name of the current file, other "
        "files open all the same (what the other files' code must not take away)",
    )
    args = parser.parse_args(argv)
    if args.set == "heldout" and args.seed not in (None, HELD_OUT_SEED):
        parser.error(f"the held-out set has one seed ({HELD_OUT_SEED}); other seeds are for --set dev")
    packages = HELD_OUT_PACKAGES if args.set == "heldout" else DEV_PACKAGES
    seed = HELD_OUT_SEED if args.set == "heldout" else (args.seed if args.seed is not None else 1)
    started = time.monotonic()
    files = package_files(packages)
    texts = {f.path: f.text for f in files.files}
    holes = cut_cross_holes(files, args.n, seed, args.control)
    backend = load_default_backend()
    pipeline = Pipeline(backend, settings=PipelineSettings(max_middle_tokens=Settings().max_middle_tokens))
    arms: dict[str, list[dict]] = {"without": [], "with": []}
    costs, found = [], []
    out = open(args.per_hole, "w", encoding="utf-8") if args.per_hole else None
    for hole in holes:
        ms, holds = selection(pipeline.related, hole, texts)
        costs.append(ms)
        found.append(holds)
        for arm in arms:
            record = ask(pipeline, hole, texts, arm == "with", arm)
            arms[arm].append(record)
            if out:
                out.write(
                    json.dumps(
                        {
                            "id": hole.id,
                            "arm": arm,
                            "source": f"{hole.path}:{hole.line}",
                            "want": hole.middle,
                            "name": hole.name,
                            "defined_in": hole.defined_in,
                            "selected": holds,
                            **record,
                        }
                    )
                    + "\n"
                )
            print(
                f"{arm:7s} {hole.path}:{hole.line:<5d} {record['ms']:6.0f} ms want {hole.middle!r:.40s} "
                f"got {record['fill']!r:.40s}",
                flush=True,
            )
    if out:
        out.close()
    backend.close()
    pairs = list(zip(arms["without"], arms["with"]))
    report = {
        "set": args.set,
        "seed": seed,
        "control": args.control,
        "holes": len(holes),
        "packages": sorted({h.path.split("/")[0] for h in holes}),
        **{arm: summarise(recs) for arm, recs in arms.items()},
        "exact_only": {
            "with": sum(b["exact"] and not a["exact"] for a, b in pairs),
            "without": sum(a["exact"] and not b["exact"] for a, b in pairs),
        },
        "selection_holds_the_name": _share(sum(found), len(found)),
        "selection_ms": {"p50": round(percentile(costs, 50) or 0, 3), "p95": round(percentile(costs, 95) or 0, 3)},
        "backend": backend.info.model,
        "cores": os.cpu_count(),
        "cpu_flags": kernel_flags(),
        "seconds": round(time.monotonic() - started),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
