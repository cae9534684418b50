"""Live requests per document: the registry behind the model worker's supersession rules (infill/worker.py).

A `Ticket` each, from the moment a request arrives, so a newer keystroke supersedes an older request still in its
debounce: a claim of kind "inline" cancels the document's older inline claim; a document change cancels every
claim on it; an inline request asking exactly what the live one asks joins it (`Claim`) instead of starting
another. Thread-safe: the server's event loop, the gateway's HTTP threads and the worker use it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field

from infill.types import CancelToken

NEWEST_WINS = "inline"  # the claim kind for which a newer claim on the same document supersedes the older


@dataclass(eq=False)
class Ticket:
    """One request's claim on its document, from its arrival to its reply."""

    uri: str
    kind: str  # NEWEST_WINS ("inline") or anything else ("action": runs unless the document changes)
    token: CancelToken = field(default_factory=CancelToken)
    key: Hashable | None = None  # what an inline request asks (version, cursor, trigger); an identical one joins
    run: object = None  # the caller's handle on the work done for the ticket, shared by the requests that joined
    answering: Claim | None = None  # the request the run answers; None: no request waits for it

    @property
    def stopped(self) -> bool:
        return self.token.cancelled


@dataclass(eq=False)
class Claim:
    """One request's hold on a ticket: the ticket it opened, or the one it joined (taking the run over)."""

    ticket: Ticket
    joined: bool = False
    taken_over: Future[None] = field(default_factory=Future)  # done when a newer identical request takes the run over

    @property
    def answered(self) -> bool:
        """This request gets the run's answer: no identical request took it over."""
        return self.ticket.answering is self


class Claims:
    """Live requests per document. Thread-safe: the server's event loop, HTTP threads and the worker use it."""

    def __init__(self, on_cancel: Callable[[], None] = lambda: None) -> None:
        self._lock = threading.Lock()
        self._newest: dict[str, Ticket] = {}
        self._all: dict[str, set[Ticket]] = {}
        self._on_cancel = on_cancel  # the worker drops cancelled queued jobs at once

    def open(self, uri: str, kind: str, token: CancelToken | None = None, key: Hashable | None = None) -> Ticket:
        ticket = Ticket(uri, kind, token or CancelToken(), key)
        older = None
        with self._lock:
            if kind == NEWEST_WINS:
                older = self._newest.get(uri)
                self._newest[uri] = ticket
            self._all.setdefault(uri, set()).add(ticket)
        if older is not None and older.token is not ticket.token and not older.token.cancelled:
            older.token.cancel("superseded by a newer inline request")
            self._on_cancel()
        return ticket

    def join_or_open(self, uri: str, key: Hashable) -> Claim:
        """An inline request for `uri` asking `key`: it joins the document's live inline ticket when that one asks
        the same and still runs, else it opens a new ticket, which supersedes the older one."""
        with self._lock:
            live = self._newest.get(uri)
            if live is not None and live.key == key and not live.token.cancelled:
                claim, older = Claim(live, joined=True), live.answering
                live.answering = claim
            else:
                live = None
        if live is None:
            ticket = self.open(uri, NEWEST_WINS, key=key)
            ticket.answering = claim = Claim(ticket)
        elif older is not None and not older.taken_over.done():  # (done: that request stopped waiting already)
            older.taken_over.set_result(None)
        return claim

    def leave(self, claim: Claim) -> bool:
        """`claim`'s request stops waiting (its client cancelled it). Whether no request waits for the run now: the
        caller then `release`s it, after a grace in which an identical request may still join."""
        with self._lock:
            if claim.ticket.answering is claim:
                claim.ticket.answering = None
            return claim.ticket.answering is None

    def release(self, ticket: Ticket, reason: str = "request cancelled by the client") -> bool:
        """Stop `ticket`'s run if no request waits for it; whether it was stopped."""
        with self._lock:
            unwaited = ticket.answering is None
        if unwaited and not ticket.token.cancelled:
            ticket.token.cancel(reason)
            self._on_cancel()
        return unwaited

    def close(self, ticket: Ticket) -> None:
        with self._lock:
            if self._newest.get(ticket.uri) is ticket:
                del self._newest[ticket.uri]
            tickets = self._all.get(ticket.uri)
            if tickets is not None:
                tickets.discard(ticket)
                if not tickets:
                    del self._all[ticket.uri]

    def document_changed(self, uri: str) -> int:
        """Cancel every request claiming `uri` (what they compute is for an older version); returns how many."""
        with self._lock:
            tokens = {t.token for t in self._all.get(uri, ())}
        for token in tokens:
            token.cancel("the document changed")
        if tokens:
            self._on_cancel()
        return len(tokens)

    def cancel_all(self, reason: str) -> None:
        with self._lock:
            tokens = {t.token for tickets in self._all.values() for t in tickets}
        for token in tokens:
            token.cancel(reason)
        self._on_cancel()

    @property
    def running(self) -> int:
        """Requests alive (in their debounce, queued or running); a request and its job count once."""
        with self._lock:
            return len({t.token for tickets in self._all.values() for t in tickets})
