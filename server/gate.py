"""Checks every model request passes first: enabled, language, backend ready, document size and content.

A refusal is logged once per document version (a client asks on every keystroke; one line says why)."""

from __future__ import annotations

from lsprotocol import types

from .documents import Clamp, Document


def refusal(ls, document: Document | None, uri: str) -> str | None:
    """Why no model work is done for `uri` right now, or None when it may proceed."""
    if document is None:
        return f"{uri} is not open (no didOpen, or closed)"
    if document.untrusted:
        return f"{uri} is out of sync with the editor ({document.untrusted}); waiting for its full text or a reopen"
    settings = ls.settings
    if not settings.enabled:
        return "completions are disabled (infill.toggle or setting enabled=false)"
    if not settings.language_enabled(document.language_id):
        return f"language {document.language_id!r} is not in enabledLanguages"
    if document.oversized or document.length > settings.max_document_chars:
        return (
            f"{uri} has {document.length} characters, more than maxDocumentChars={settings.max_document_chars}; "
            "not sending it to the model"
        )
    if document.has_nul:
        return f"{uri} contains NUL bytes (binary?); not sending it to the model"
    if not ls.host.ready:
        return f"the backend is not ready (state {ls.host.state}{': ' + ls.host.error if ls.host.error else ''})"
    return None


def log_refusal(ls, uri: str, version: int | None, reason: str, *, quiet_when_loading: bool = True) -> None:
    key = (uri, version, reason)
    if key in ls.logged_refusals:
        return
    if len(ls.logged_refusals) > 1000:
        ls.logged_refusals.clear()
    ls.logged_refusals.add(key)
    if quiet_when_loading and ls.host.state == "loading" and "not ready" in reason:
        return  # expected during start-up; progress notifications already say so
    ls.log(f"no completion for {uri}: {reason}", types.MessageType.Info)


def offset_logged(ls, document: Document, position: types.Position) -> int:
    """Offset of `position`, logging when the client sent a position outside the document."""
    clamp = Clamp()
    offset = document.offset_at(position, clamp)
    if clamp.note:
        ls.log(f"{document.uri}@{document.version}: {clamp.note}; clamped", types.MessageType.Warning)
    return offset
