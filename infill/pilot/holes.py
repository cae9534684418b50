"""Holes cut deterministically from real files: a span (start, end) of a file's text whose content is the expected
middle. `prefix + middle + suffix` is always the file, byte for byte."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from infill.pilot.files import Discovery, SourceFile
from infill.pilot.spans import CUTTERS, KINDS, Span
from infill.types import InfillError

# Kinds that complete the rest of a line from a cursor use the editor's inline mode; the others are selected gaps.
MODE_BY_KIND = {"single-line": "inline"}


@dataclass(frozen=True)
class Hole:
    id: str
    path: str
    language: str
    kind: str
    line: int  # 1-based line where the middle starts
    prefix: str
    middle: str
    suffix: str
    mode: str = "gap"

    @property
    def text_without_middle(self) -> str:
        return self.prefix + self.suffix

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> Hole:
        return cls(**json.loads(line))


@dataclass(frozen=True)
class CutSettings:
    n: int = 50
    seed: int = 0
    kinds: tuple[str, ...] = KINDS
    max_scan_files: int = 3000  # stop reading more files once this many were scanned and every kind has enough

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise InfillError(f"the number of holes must be a positive integer, got {self.n!r}")
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown or not self.kinds:
            raise InfillError(f"unknown hole kind(s) {unknown or '(none given)'}; choose from {', '.join(KINDS)}")


def _make_hole(source: SourceFile, kind: str, span: Span, index: int) -> Hole:
    text = source.text
    return Hole(
        id=f"{index:04d}-{kind}",
        path=source.path,
        language=source.language,
        kind=kind,
        line=text.count("\n", 0, span.start) + 1,
        prefix=text[: span.start],
        middle=text[span.start : span.end],
        suffix=text[span.end :],
        mode=MODE_BY_KIND.get(kind, "gap"),
    )


def _quotas(n: int, available: dict[str, int]) -> dict[str, int]:
    """Split n holes as evenly as possible over kinds, moving the share of a kind that runs out to the others."""
    quotas = dict.fromkeys(available, 0)
    left = n
    open_kinds = [k for k in available if available[k] > 0]
    while left > 0 and open_kinds:
        share = max(1, math.floor(left / len(open_kinds)))
        for kind in list(open_kinds):
            take = min(share, available[kind] - quotas[kind], left)
            quotas[kind] += take
            left -= take
            if quotas[kind] >= available[kind]:
                open_kinds.remove(kind)
            if left == 0:
                break
    return quotas


def cut_holes(found: Discovery, settings: CutSettings) -> list[Hole]:
    """Up to `settings.n` holes, spread over the requested kinds and over files, interleaved by kind (so a run cut
    short by its time cap still has every kind). The same files and seed give the same holes."""
    rng = random.Random(settings.seed)
    files = list(found.files)
    rng.shuffle(files)
    # kind -> [(file, candidate spans)] in scan order; each file adds at most one candidate list per kind.
    pools: dict[str, list[tuple[SourceFile, list[Span]]]] = {k: [] for k in settings.kinds}
    for scanned, source in enumerate(files, 1):
        for kind in settings.kinds:
            spans = CUTTERS[kind](source)
            if spans:
                pools[kind].append((source, spans))
        if scanned >= settings.max_scan_files and all(len(p) >= settings.n for p in pools.values()):
            break
    available = {k: sum(len(s) for _, s in pools[k]) for k in settings.kinds}
    quotas = _quotas(settings.n, available)
    chosen = {k: _pick(pools[k], quotas[k], rng) for k in settings.kinds}
    holes: list[Hole] = []
    for round_index in range(max(quotas.values(), default=0)):
        for kind in settings.kinds:
            if round_index < len(chosen[kind]):
                source, span = chosen[kind][round_index]
                holes.append(_make_hole(source, kind, span, len(holes)))
    return holes


def _pick(pool: list[tuple[SourceFile, list[Span]]], quota: int, rng: random.Random) -> list[tuple[SourceFile, Span]]:
    """One candidate per file in turn (spread over files), drawing without replacement, until the quota is met."""
    remaining = [(source, list(spans)) for source, spans in pool]
    picked: list[tuple[SourceFile, Span]] = []
    while len(picked) < quota and remaining:
        for source, spans in remaining:
            if len(picked) >= quota:
                break
            if spans:
                picked.append((source, spans.pop(rng.randrange(len(spans)))))
        remaining = [(s, sp) for s, sp in remaining if sp]
    return picked


def write_holes(holes: Iterable[Hole], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for hole in holes:
            out.write(hole.to_json() + "\n")


def read_holes(path: str | Path) -> list[Hole]:
    with open(path, encoding="utf-8") as src:
        return [Hole.from_json(line) for line in src if line.strip()]
