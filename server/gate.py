"""Checks every model request passes first: enabled, language, backend ready, document size and content.

A refusal is logged once per document version and reason (a client asks on every keystroke; one line says why),
and "not ready" not at all while the backend loads (its progress says so)."""

from __future__ import annotations

from typing import Protocol

from lsprotocol import types

from .backend_host import BackendHost
from .documents import Clamp, Document
from .settings import Settings
from .telemetry import RefusalLog


class ClientLog(Protocol):
    """A line for the client's log (and the server's own): InfillServer.log."""

    def __call__(self, message: str, kind: types.MessageType = ..., /) -> None: ...


def refusal(document: Document | None, uri: str, settings: Settings, host: BackendHost) -> str | None:
    """Why no model work is done for `uri` right now, or None when it may proceed."""
    if document is None:
        return f"{uri} is not open (no didOpen, or closed)"
    if document.untrusted:
        return f"{uri} is out of sync with the editor ({document.untrusted}); waiting for its full text or a reopen"
    if not settings.enabled:
        return "completions are disabled (infill.toggle or setting enabled=false)"
    if not settings.language_enabled(document.language_id, uri):
        return f"language {document.language_id!r} is not in enabledLanguages"
    if document.oversized or document.length > settings.max_document_chars:
        return (
            f"{uri} has {document.length} characters, more than maxDocumentChars={settings.max_document_chars}; "
            "not sending it to the model"
        )
    if document.has_nul:
        return f"{uri} contains NUL bytes (binary?); not sending it to the model"
    if not host.ready:
        return f"the backend is not ready (state {host.state}{': ' + host.error if host.error else ''})"
    return None


def log_refusal(
    refusals: RefusalLog, host: BackendHost, log: ClientLog, uri: str, version: int | None, reason: str
) -> None:
    """Log why `uri` gets no completion, once per version and reason; quiet while the backend loads (progress
    notifications already say so)."""
    if refusals.first(uri, version, reason) and not (host.state == "loading" and "not ready" in reason):
        log(f"no completion for {uri}: {reason}", types.MessageType.Info)


def offset_logged(document: Document, position: types.Position, log: ClientLog) -> int:
    """Offset of `position`, logging when the client sent a position outside the document."""
    clamp = Clamp()
    offset = document.offset_at(position, clamp)
    if clamp.note:
        log(f"{document.uri}@{document.version}: {clamp.note}; clamped", types.MessageType.Warning)
    return offset
