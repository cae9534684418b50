"""The next line's suggestion, computed ahead (as llama.vim's speculative FIM does): ghost text is wanted most when a
new line starts, and its first keys come faster than a fill.

- An edit that leaves the cursor at the end of a blank line's indentation (an Enter) starts the completion there
  at once, with no request and no debounce; a suggestion accepted to the end of its line starts it for the line
  an Enter would open next (the text as it will be: a line break and the indentation the editor gives it).
- Typing at that cursor keeps it; any other edit, a close or a newer speculation cancels it. It is no inline
  request: inline requests neither supersede it nor join it, they wait for it (`settle`).
- Its suggestion becomes the document's last suggestion (server/typed_through.py): a request for its text, or for
  its text with the suggestion's first characters typed, is answered from it without the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from infill.context.indentation import indent_unit
from infill.languages import opens_block
from infill.pipeline import CompletionRequest, Pipeline, PipelineResult
from infill.types import CancelToken, FillControl, deadline_in

from .backend_host import BackendHost
from .budget import BudgetPolicy
from .documents import Document
from .typed_through import TypedThrough
from .verdict import usable_fills

SETTLE_GRACE_S = 1.0  # a request waits for the speculation it would be answered from until its deadline and this


@dataclass(eq=False)
class Ahead:
    """One speculation: the completion of `text` at `cursor`, running on the model thread."""

    uri: str
    text: str
    cursor: int
    budget_s: float  # its deadline, from its start
    token: CancelToken = field(default_factory=CancelToken)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def covers(self, text: str, cursor: int) -> bool:
        """`text` is this one's text with characters typed at its cursor, and `cursor` is after them."""
        typed = cursor - self.cursor
        return (
            typed >= 0
            and len(text) == len(self.text) + typed
            and text.startswith(self.text[: self.cursor])
            and text.endswith(self.text[self.cursor :])
            and "\n" not in text[self.cursor : cursor]
        )


class NextLine:
    """The document's running speculation, one per document at most. Event loop only."""

    def __init__(self, host: BackendHost, typed_through: TypedThrough, budget: BudgetPolicy) -> None:
        self._host = host  # runs the speculation on the model thread
        self._budget = budget  # its deadline, an inline request's
        self._typed_through = typed_through  # answers from it, and says when a suggestion was typed through
        self._ahead: dict[str, Ahead] = {}
        self.started = 0  # speculations started
        self.answered = 0  # requests answered from one (also counted by typed_through)

    def edited(self, document: Document, offset: int, allowed: Callable[[], bool], budget_ms: int | None) -> bool:
        """After an edit that left the cursor at `offset`: keep, cancel or start the document's speculation
        (`allowed()`: the document passes server/gate.py's checks; `budget_ms`: the inlineBudgetMs setting).
        Whether one runs for the document now."""
        ahead = self._ahead.get(document.uri)
        text = document.text
        if ahead is not None and ahead.covers(text, offset):
            return not ahead.done.is_set()  # typing on at its cursor, or the Enter it foresaw: it stands
        self.cancel(document.uri)
        target = _new_line(text, offset) or self._after_accepted(document, offset)
        pipeline = self._host.pipeline
        if target is None or pipeline is None or not allowed():
            return False
        self._start(pipeline, document, self._budget.budget_ms(budget_ms) / 1000, *target)
        return True

    def cancel(self, uri: str) -> None:
        ahead = self._ahead.pop(uri, None)
        if ahead is not None:
            ahead.token.cancel("the document changed otherwise")

    async def settle(self, uri: str, text: str, cursor: int) -> bool:
        """Wait for a speculation this request would be answered from (the model thread would run this request
        after it anyway); whether there was one."""
        ahead = self._ahead.get(uri)
        if ahead is None or not ahead.covers(text, cursor):
            return False
        if not ahead.done.is_set():
            try:
                await asyncio.wait_for(ahead.done.wait(), ahead.budget_s + SETTLE_GRACE_S)
            except asyncio.TimeoutError:
                return False
        return True

    def _start(
        self, pipeline: Pipeline, document: Document, budget_s: float, text: str, cursor: int, real: bool
    ) -> None:
        ahead = Ahead(document.uri, text, cursor, budget_s)
        self._ahead[document.uri] = ahead
        self.started += 1
        # A text the document does not have yet (the line an Enter will open) is no version of it: it gets no
        # document id, so neither the document's syntax tree nor its encoded prompt is replaced by it.
        # Greedy only: the requests that wait for it wait for its other fills too, and would run their own after
        # a refused one anyway.
        request = CompletionRequest(
            text=text,
            start=cursor,
            mode="inline",
            language=document.language_id,
            document_id=document.uri if real else None,
            version=document.version if real else None,
            alternatives=0,
            keystroke=True,
        )
        future = self._host.complete(pipeline, request, FillControl(cancel=ahead.token, deadline=deadline_in(budget_s)))
        loop = asyncio.get_running_loop()
        future.add_done_callback(lambda done: loop.call_soon_threadsafe(self._finish, ahead, done))

    def _finish(self, ahead: Ahead, done: Future[PipelineResult]) -> None:
        ahead.done.set()
        if self._ahead.get(ahead.uri) is not ahead or ahead.token.cancelled or done.exception() is not None:
            return
        completion: PipelineResult = done.result()
        fills = usable_fills(completion.fills)
        if fills:
            self._typed_through.remember(
                ahead.uri, ahead.text, ahead.cursor, fills[0].start, fills[0].end, fills[0].text
            )

    def _after_accepted(self, document: Document, offset: int) -> tuple[str, int, bool] | None:
        """A suggestion just accepted (or typed through) to the end of its line: the line an Enter opens next, with
        the indentation an editor gives it (the line's own, one step deeper after a block opener)."""
        text = document.text
        if not self._typed_through.completed(document.uri, text, offset):
            return None
        line_start = text.rfind("\n", 0, offset) + 1
        line_end = text.find("\n", offset)
        line_end = len(text) if line_end < 0 else line_end
        line = text[line_start:offset]
        if not line.strip() or text[offset:line_end].strip():
            return None
        indent = line[: len(line) - len(line.lstrip())]
        if opens_block(line, document.language_id):
            indent += indent_unit(text, max(0, line_start - 2000), min(len(text), offset + 1000), document.language_id)
        cursor = offset + 1 + len(indent)
        return text[:offset] + "\n" + indent + text[offset:], cursor, False


def _new_line(text: str, offset: int) -> tuple[str, int, bool] | None:
    """The cursor at the end of a blank line's indentation, below another line: a new line, as it stands."""
    line_start = text.rfind("\n", 0, offset) + 1
    if line_start == 0 or text[line_start:offset].strip():
        return None
    line_end = text.find("\n", offset)
    return (text, offset, True) if not text[offset : len(text) if line_end < 0 else line_end].strip() else None
