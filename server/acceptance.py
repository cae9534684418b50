"""What became of the inline suggestions the server gave, in the shape the ecosystem uses (Copilot's language
server): shown, accepted whole or in part, rejected, and how many accepted characters are still there later.

Sources, most direct first: the client's `textDocument/didShowCompletion` / `didPartiallyAcceptCompletion`
notifications and the item's accept command (ACCEPT_COMMAND); where a client sends nothing (VS Code's stable API
has no show/partial/reject events, Neovim 0.12's built-in inline completion sends none), the didChange that follows
a suggestion:
- accepted: the document holds the item's whole text at its anchor (Tab, or typing every character of it);
- partially accepted: one change inserts two or more further characters of the item's text (a word, a line);
  single typed characters that match are typing through, not an accept;
- rejected: the text at the anchor stops matching the suggestion, or an edit lands before the anchor, and nothing
  of the suggestion was accepted. A reply superseded by a newer one while it still matched counts as neither.
  Once a client sends didShowCompletion only suggestions it showed can be rejected; from a client that sends none
  the server cannot know a suggestion was drawn, so rejections are then an upper bound.
Each report only raises what is known (an accept seen both in a notification and in the didChange counts once).

Retained: RETAIN_DELAY_S after a suggestion's first accept, the accepted text is looked for in the document around
its anchor (infill.metrics.retained_chars, the definition the pilot uses too). GitHub's headline measure is
accepted-and-retained characters; 30 s is long enough for an immediate undo or rewrite to show, short enough to be
measured before most documents close. A document closed first is not measured. Units are characters (code
points); the protocol's UTF-16 lengths are converted on arrival."""

from __future__ import annotations

import itertools
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infill.metrics import retained_chars

from .documents import Document, utf16_to_index

ACCEPT_COMMAND = "infill.didAcceptCompletion"
RETAIN_DELAY_S = float(os.environ.get("INFILL_RETAIN_SECONDS", "30"))  # the environment shortens it for tests
AROUND_CHARS = 64  # text kept on either side of an anchor to recognise the place after an edit
RETAIN_WINDOW_CHARS = 2000  # how far around the anchor retained text is looked for
KEEP_SUGGESTIONS = 512  # suggestions remembered for late notifications (oldest forgotten first)


@dataclass
class Suggestion:
    """One item of an inline reply, at its anchor in the document version it was computed for."""

    id: str
    reply: str
    uri: str
    text: str  # the item's insertText
    start: int  # str offsets of the item's range in the document it was given for
    end: int
    base_length: int  # that document's length
    before: str  # the text just before the anchor
    tail: str  # the text from the anchor on (what stood after the cursor)
    after_end: str  # the text after the item's range
    shown: bool = False
    typed: int = 0  # characters of the item at the anchor after the last change (typing through)
    accepted: int = 0  # characters of the item accepted so far
    accepted_at: float | None = None
    live: bool = True  # still compared with the edits that follow
    retained: int | None = None


@dataclass
class Reply:
    id: str
    items: list[Suggestion]
    rejected: bool = False  # counted rejected (every item went stale, none accepted)


@dataclass
class AcceptanceTracker:
    """Turns the client's reports and the edits after each reply into events for `record`."""

    record: Callable[..., None]  # (event, suggestion or None, **fields): Telemetry.count_event
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _by_id: OrderedDict[str, Suggestion] = field(default_factory=OrderedDict)
    _live: dict[str, Reply] = field(default_factory=dict)  # uri -> Reply still compared with edits
    inferring: bool = True  # off once a client reports with the old infill/telemetry (it tells everything)
    on_first_accept: Callable[[Suggestion], None] | None = None  # schedules the retained check
    client_reports_shown: bool = False  # once it sent didShowCompletion, only shown suggestions can be rejected

    # -- replies ---------------------------------------------------------------------------------------------------
    def offer(self, document: Document, items: list[tuple[str, int, int]]) -> list[str]:
        """Remember a reply's items (text, start, end in `document.text`); returns their ids for the accept
        command. A newer reply for the same document supersedes the older one."""
        self._live.pop(document.uri, None)
        text = document.text
        reply = Reply(id=str(next(self._ids)), items=[])
        for insert, start, end in items:
            suggestion = Suggestion(
                id=f"{reply.id}.{len(reply.items) + 1}",
                reply=reply.id,
                uri=document.uri,
                text=insert,
                start=start,
                end=end,
                base_length=len(text),
                before=text[max(0, start - AROUND_CHARS) : start],
                tail=text[start : start + AROUND_CHARS],
                after_end=text[end : end + AROUND_CHARS],
            )
            reply.items.append(suggestion)
            self._remember(suggestion)
        self._live[document.uri] = reply
        return [s.id for s in reply.items]

    def _remember(self, suggestion: Suggestion) -> None:
        self._by_id[suggestion.id] = suggestion
        while len(self._by_id) > KEEP_SUGGESTIONS:
            self._by_id.popitem(last=False)

    def find(self, item: dict[str, Any]) -> Suggestion | None:
        """The suggestion a client's item stands for: by the id in its command, else by its text among the
        replies still live."""
        command = item.get("command")
        arguments = command.get("arguments") if isinstance(command, dict) else None
        if isinstance(arguments, list) and arguments and isinstance(arguments[0], str):
            found: Suggestion | None = self._by_id.get(arguments[0])
            if found is not None:
                return found
        insert = item_text(item)
        for reply in self._live.values():
            for suggestion in reply.items:
                if suggestion.text == insert:
                    return suggestion
        return None

    # -- what clients report ---------------------------------------------------------------------------------------
    def shown(self, item: dict[str, Any]) -> None:
        self.client_reports_shown = True
        suggestion = self.find(item)
        if suggestion is None:
            self.record("shown", None, source="client", totalChars=len(item_text(item)))
        elif not suggestion.shown:
            suggestion.shown = True
            self.record("shown", suggestion, source="client", totalChars=len(suggestion.text))

    def partially_accepted(self, item: dict[str, Any], accepted_utf16: int) -> None:
        text = item_text(item)
        chars = utf16_to_index(text, accepted_utf16)
        suggestion = self.find(item)
        if suggestion is None:
            kind = "accepted_full" if chars >= len(text) else "accepted_partial"
            self.record(kind, None, source="client", acceptedChars=chars, gainedChars=chars, totalChars=len(text))
        else:
            self._accept_to(suggestion, chars, "client")

    def accepted(self, suggestion_id: str) -> bool:
        """The accept command of an item; False for an id this server does not know (any more)."""
        suggestion = self._by_id.get(suggestion_id)
        if suggestion is None:
            return False
        self._accept_to(suggestion, len(suggestion.text), "command")
        return True

    def _accept_to(self, suggestion: Suggestion, chars: int, source: str) -> None:
        chars = min(chars, len(suggestion.text))
        if chars <= suggestion.accepted:
            return  # known already (the didChange and the client's report describe the same accept)
        gained, suggestion.accepted = chars - suggestion.accepted, chars
        if suggestion.accepted_at is None:
            suggestion.accepted_at = time.monotonic()
            if self.on_first_accept is not None:
                self.on_first_accept(suggestion)
        whole = chars == len(suggestion.text)
        if whole:
            suggestion.live = False
        self.record(
            "accepted_full" if whole else "accepted_partial",
            suggestion,
            source=source,
            acceptedChars=chars,
            gainedChars=gained,
            totalChars=len(suggestion.text),
        )

    # -- what the edits show ---------------------------------------------------------------------------------------
    def changed(self, document: Document) -> None:
        """After a didChange: compare each live suggestion of the document with its text at the anchor."""
        reply = self._live.get(document.uri)
        if reply is None or not self.inferring:
            return
        text = document.text  # (already joined for the requests that produced the reply)
        for suggestion in reply.items:
            if suggestion.live:
                self._compare(suggestion, text)
        if not any(s.live for s in reply.items):
            del self._live[document.uri]
            unseen = self.client_reports_shown and not any(s.shown for s in reply.items)
            if reply.items and not unseen and not any(s.accepted for s in reply.items):
                reply.rejected = True
                self.record("rejected", reply.items[0], source="edit", totalChars=len(reply.items[0].text))

    def _compare(self, s: Suggestion, text: str) -> None:
        start = s.start
        if text[max(0, start - AROUND_CHARS) : start] != s.before:
            s.live = False  # an edit before the anchor: the user went elsewhere
            return
        whole_length = s.base_length - (s.end - s.start) + len(s.text)
        if (
            len(text) == whole_length
            and text[start : start + len(s.text)] == s.text
            and text[start + len(s.text) : start + len(s.text) + len(s.after_end)] == s.after_end
        ):
            self._accept_to(s, len(s.text), "edit")
            return
        typed = len(text) - s.base_length
        matches = (
            0 <= typed <= len(s.text)
            and text[start : start + typed] == s.text[:typed]
            and text[start + typed : start + typed + len(s.tail)] == s.tail
        )
        if not matches:
            s.live = False
            return
        if typed == len(s.text):
            self._accept_to(s, typed, "edit")
        elif typed - s.typed >= 2:
            self._accept_to(s, typed, "edit")
        s.typed = typed

    def closed(self, uri: str) -> None:
        self._live.pop(uri, None)

    # -- retained --------------------------------------------------------------------------------------------------
    def check_retained(self, suggestion_id: str, document: Document | None) -> None:
        """Measure once how much of a suggestion's accepted text is still around its anchor (`document` is the
        document now, None when it was closed)."""
        suggestion = self._by_id.get(suggestion_id)
        if suggestion is None or suggestion.retained is not None or not suggestion.accepted:
            return
        if document is None:
            suggestion.retained = -1
            self.record("retained_unmeasured", suggestion, source="timer", acceptedChars=suggestion.accepted)
            return
        text = document.text
        accepted = suggestion.text[: suggestion.accepted]
        window = text[
            max(0, suggestion.start - RETAIN_WINDOW_CHARS) : suggestion.start + len(accepted) + RETAIN_WINDOW_CHARS
        ]
        suggestion.retained = retained_chars(accepted, window)
        self.record(
            "retained",
            suggestion,
            source="timer",
            acceptedChars=suggestion.accepted,
            retainedChars=suggestion.retained,
            delaySeconds=RETAIN_DELAY_S,
        )


def item_text(item: dict[str, Any]) -> str:
    """An InlineCompletionItem's insertText (a string, or a StringValue snippet's value)."""
    insert = item.get("insertText")
    if isinstance(insert, dict):
        insert = insert.get("value")
    return insert if isinstance(insert, str) else ""
