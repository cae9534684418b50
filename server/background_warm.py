"""The one background warm at a time (server/warming.py starts them): its ticket, so that any keystroke or request
can cancel it, and how many were started (status). Held by the server object, which must not import warming.py:
its `register` names the server (an import cycle)."""

from __future__ import annotations

from infill.worker import Ticket


class BackgroundWarm:
    """Event loop only."""

    def __init__(self) -> None:
        self._ticket: Ticket | None = None
        self.started = 0  # warms started (status, tests)

    def cancel(self) -> None:
        """A keystroke or a request: the model thread is theirs (the work done so far is kept)."""
        if self._ticket is not None:
            self._ticket.token.cancel("a keystroke or a request came")
            self._ticket = None

    def hold(self, ticket: Ticket) -> None:
        """`ticket` is the warm now running (the one before it was cancelled first)."""
        self._ticket = ticket
        self.started += 1
