"""Per-document scheduling of model work: newest request wins, edits cancel what is running, and every running
request has a CancelToken the engine checks between denoising steps.

A `Ticket` is one request's claim on its document. Opening a newer inline ticket for the same document supersedes
the older one (its token is cancelled, so the engine stops within one step, and its handler returns nothing).
A didChange cancels every ticket of that document: whatever they compute would be for an older version.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infill.types import CancelToken


@dataclass(eq=False)
class Ticket:
    uri: str
    kind: str  # "inline" or "action"
    token: CancelToken = field(default_factory=CancelToken)

    @property
    def stopped(self) -> bool:
        return self.token.cancelled


class Scheduler:
    def __init__(self) -> None:
        self._inline: dict[str, Ticket] = {}
        self._all: dict[str, set[Ticket]] = {}

    def open(self, uri: str, kind: str) -> Ticket:
        ticket = Ticket(uri, kind)
        if kind == "inline":
            older = self._inline.get(uri)
            if older is not None:
                older.token.cancel("superseded by a newer inline request")
            self._inline[uri] = ticket
        self._all.setdefault(uri, set()).add(ticket)
        return ticket

    def close(self, ticket: Ticket) -> None:
        if self._inline.get(ticket.uri) is ticket:
            del self._inline[ticket.uri]
        tickets = self._all.get(ticket.uri)
        if tickets is not None:
            tickets.discard(ticket)
            if not tickets:
                del self._all[ticket.uri]

    def document_changed(self, uri: str) -> int:
        """Cancel every request running for `uri`; returns how many were cancelled."""
        tickets = self._all.get(uri, ())
        for ticket in tickets:
            ticket.token.cancel("the document changed")
        return len(tickets)

    def cancel_all(self, reason: str) -> None:
        for tickets in self._all.values():
            for ticket in tickets:
                ticket.token.cancel(reason)

    @property
    def running(self) -> int:
        return sum(len(t) for t in self._all.values())
