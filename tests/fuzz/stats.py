"""What a fuzz run counts: failures by kind (each one with its first details) and how much was checked."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Stats:
    sessions: int = 0
    requests: int = 0
    crashes: int = 0
    hangs: int = 0
    stale_edits: int = 0
    bad_edits: int = 0
    protocol_errors: int = 0
    internal_errors: int = 0  # -32603 answers
    tracebacks: int = 0  # on the server's stderr
    edits_checked: int = 0  # coverage: edits and inline items whose ranges were checked
    actions_checked: int = 0
    problems: list = field(default_factory=list)

    def note(self, kind: str, detail: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.problems) < 20:
            self.problems.append(f"{kind}: {detail[:400]}")

    def summary(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "problems"} | {"problems": self.problems}


def count_tracebacks(stderr_path: str | None, stats: Stats, seed: int) -> None:
    """The server's stderr must hold no traceback: each one is an unchecked path (issue 24)."""
    if stderr_path is None:
        return
    try:
        text = open(stderr_path, encoding="utf-8", errors="replace").read()
    except OSError:
        return
    marker = "Traceback (most recent call last)"
    at = text.find(marker)
    while at >= 0:
        stats.note("tracebacks", f"seed {seed}: {text[at : at + 400]}")
        at = text.find(marker, at + 1)
