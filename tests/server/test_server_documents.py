"""Documents (server/documents.py) and the text-sync handlers: UTF-16 <-> str offsets, incremental edits (CRLF,
surrogate pairs), NUL bytes, oversized and large documents, didChange/didClose reaching the pipeline. Each is
checked against an independent reference (plain str operations)."""

from __future__ import annotations

import random

from lsp_helpers import refused_remote, utf16_offset
from lsprotocol import types

from infill.types import CancelToken
from server.documents import Clamp, Document, split_lines
from server.settings import Settings

P = types.Position


def _change(doc_text: str, start: P, end: P, new: str) -> types.TextDocumentContentChangePartial:
    return types.TextDocumentContentChangePartial(range=types.Range(start=start, end=end), text=new)


def test_split_lines_uses_only_lsp_line_endings():
    assert split_lines("a\r\nb\rc\nd\u2028e\x0cf") == ["a\r\n", "b\r", "c\n", "d\u2028e\x0cf"]
    assert split_lines("x\n") == ["x\n", ""]


def test_offsets_round_trip_with_surrogate_pairs_and_crlf():
    text = "café 🎉x\r\n😀😀 = 1\rlast\n"
    doc = Document("file:///a", text, 1, "python")
    for line, character in [(0, 0), (0, 5), (0, 7), (0, 8), (1, 0), (1, 2), (1, 4), (1, 8), (2, 4), (3, 0)]:
        offset = doc.offset_at(P(line, character))
        assert offset == utf16_offset(text, P(line, character))
        assert doc.position_at(offset) == P(line, character)


def test_positions_outside_the_document_are_clamped_and_noted():
    doc = Document("file:///a", "ab\n😀\n", 1, None)
    clamp = Clamp()
    assert doc.offset_at(P(0, 99), clamp) == 2 and "character 99" in clamp.note
    clamp = Clamp()
    assert doc.offset_at(P(7, 0), clamp) == len("ab\n😀\n") and "line 7" in clamp.note
    clamp = Clamp()
    assert doc.offset_at(P(1, 1), clamp) == 3 and clamp.note  # inside a surrogate pair: start of the character


def test_incremental_edits_match_a_reference_including_crlf_splits():
    rng = random.Random(7)
    alphabet = ["a", "é", "😀", "\n", "\r\n", "\r", " "]
    text = "def f():\r\n    return 1\r\n\r\nx = '😀'\n"
    doc = Document("file:///a", text, 0, "python")
    applied = 0
    for version in range(1, 400):
        starts = [utf16_offset(text, P(0, 0))]
        lines = split_lines(text)
        line_a, line_b = sorted(rng.randrange(len(lines)) for _ in range(2))
        col_a, col_b = rng.randrange(6), rng.randrange(6)
        start, end = P(line_a, col_a), P(line_b, col_b)
        a, b = utf16_offset(text, start), utf16_offset(text, end)
        if (line_a, col_a) > (line_b, col_b) or a > b or not (_valid(text, start) and _valid(text, end)):
            continue  # an inverted range, or a column inside a surrogate pair (invalid LSP position)
        new = "".join(rng.choice(alphabet) for _ in range(rng.randrange(4)))
        assert doc.apply(_change(text, start, end, new)) == (a, b)  # the str range replaced (for the pipeline)
        text = text[:a] + new + text[b:]
        assert doc.text == text and doc.length == len(text) and doc.lines == split_lines(text), (version, starts)
        for line in {min(line_a, len(doc.lines) - 1), rng.randrange(len(doc.lines))}:  # line starts kept
            position = P(line, 0)
            assert doc.offset_at(position) == utf16_offset(text, position)
            assert doc.position_at(doc.offset_at(position)) == position
        applied += 1
    assert applied > 100


def _valid(text: str, position: P) -> bool:
    """False for a column that falls inside a surrogate pair (not a valid LSP position)."""
    line = split_lines(text)[position.line].rstrip("\r\n")
    units = 0
    for char in line:
        if units >= position.character:
            break
        units += 2 if ord(char) > 0xFFFF else 1
    return units == position.character or units < position.character


def test_nul_bytes_are_tracked_through_edits():
    doc = Document("file:///a", "abc\ndef\n", 0, "python")
    assert not doc.has_nul
    doc.apply(_change(doc.text, P(0, 1), P(0, 1), "\x00"))  # typed (or pasted) a NUL
    assert doc.has_nul and doc.text == "a\x00bc\ndef\n"
    doc.apply(_change(doc.text, P(1, 0), P(1, 1), "D"))  # an edit elsewhere keeps it
    assert doc.has_nul
    doc.apply(_change(doc.text, P(0, 1), P(0, 2), ""))  # deleted again
    assert not doc.has_nul and doc.text == "abc\nDef\n"


def test_full_change_replaces_text():
    doc = Document("file:///a", "old", 1, None)
    doc.apply(types.TextDocumentContentChangeWholeDocument(text="new\r\ntext"))
    assert doc.text == "new\r\ntext" and doc.offset_at(P(1, 2)) == 7


def test_oversized_document_is_kept_as_a_length_until_a_full_change_shrinks_it():
    doc = Document("file:///big", "x" * 101, 1, None, max_chars=100)
    assert doc.oversized and doc.length == 101 and doc.lines == [""]
    doc.apply(_change("", P(0, 0), P(0, 0), "more"))  # ignored: no work for a refused document
    assert doc.oversized
    doc.apply(types.TextDocumentContentChangeWholeDocument(text="small\n"))
    assert not doc.oversized and doc.text == "small\n"


def test_large_documents_join_their_text_when_asked_instead_of_copying_it_per_edit(monkeypatch):
    from server import documents

    monkeypatch.setattr(documents, "EAGER_TEXT_CHARS", 20)
    doc = Document("file:///a", "line one\nline two\nline three\n", 0, "plaintext")
    doc.apply(_change(doc.text, P(1, 5), P(1, 8), "2"))
    assert doc._text is None  # past the limit: nothing copied per edit
    assert doc.text == "line one\nline 2\nline three\n" and not doc.has_nul
    doc.apply(_change(doc.text, P(0, 0), P(0, 0), "\x00"))
    assert doc.has_nul and doc.text.startswith("\x00line one")


def _notify(server, method: str, params) -> None:
    """Deliver a text-sync notification the way pygls does: our protocol override, then the handler it yields."""
    for handler, args, _ in getattr(server.protocol, method)(params):
        handler(*args)


def test_did_close_drops_the_pipelines_syntax_tree():
    from infill.loader import Opened
    from infill.pipeline import CompletionRequest, Pipeline
    from server.main import create_server

    server = create_server(Settings(debounce_ms=0))
    backend = refused_remote()
    pipeline = Pipeline(backend)
    server.host._loaded = Opened(pipeline, (backend,))
    server.host.state = "ready"
    uri, text = "file:///closed.py", "def f():\n    return 1\n"
    _notify(
        server,
        "lsp_text_document__did_open",
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        ),
    )
    pipeline.prepare(CompletionRequest(text, 9, document_id=uri, language="python", version=1))
    assert [key[0] for key in pipeline.contexts._documents] == [uri]
    _notify(
        server,
        "lsp_text_document__did_close",
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)),
    )
    assert not pipeline.contexts._documents and server.documents.get(uri) is None
    assert server.status()["pipeline"] == {"routes": {}, "checked": 0, "rejected": {}}
    server.host.close()


def test_did_close_frees_the_prompt_the_offline_default_kept_for_the_document(ar_backend):
    """The real offline default behind the real handlers: a request leaves the document's prompt in a llama.cpp
    sequence; didClose frees it on the model thread, and a document still open keeps its own."""
    from infill.loader import Opened
    from infill.pipeline import CompletionRequest, Pipeline
    from infill.types import FillControl
    from server.main import create_server

    server = create_server(Settings(debounce_ms=0))
    pipeline = Pipeline(ar_backend)
    server.host._loaded = Opened(pipeline, ())  # the session's backend stays open for other tests
    server.host.state = "ready"
    text = "import os\n\n\ndef home():\n    return os.path.expanduser("
    uris = ["file:///closing.py", "file:///staying.py"]
    for uri in uris:
        _notify(
            server,
            "lsp_text_document__did_open",
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
            ),
        )
        request = CompletionRequest(text, len(text), language="python", document_id=uri, version=1, max_middle_tokens=2)
        server.host.complete(pipeline, request, FillControl()).result(timeout=60)
    assert all(uri in ar_backend.sequences for uri in uris)
    _notify(
        server,
        "lsp_text_document__did_close",
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uris[0])),
    )
    server.host.submit(lambda: None, CancelToken()).result(timeout=60)  # behind the forget on the model thread
    assert uris[0] not in ar_backend.sequences and uris[1] in ar_backend.sequences
    server.host.close()


def test_did_change_notes_edits_so_the_pipeline_reparses_without_comparing_texts(monkeypatch):
    from infill.context import syntax
    from infill.loader import Opened
    from infill.pipeline import CompletionRequest, Pipeline
    from server.main import create_server

    server = create_server(Settings(debounce_ms=0))
    backend = refused_remote()
    pipeline = Pipeline(backend)
    server.host._loaded = Opened(pipeline, (backend,))
    server.host.state = "ready"
    uri = "file:///typed.py"
    _notify(
        server,
        "lsp_text_document__did_open",
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text="def f(x):\r\n    return x\r\n\r\nprint(f(1))\n"
            )
        ),
    )
    document = server.documents.get(uri)
    pipeline.prepare(CompletionRequest(document.text, 0, document_id=uri, language="python", version=1))

    def no_text_comparison(*args):
        raise AssertionError("didChange must hand the pipeline its edits")

    monkeypatch.setattr(syntax, "diff_edit", no_text_comparison)
    edits = [
        (P(1, 12), P(1, 12), " + 😀"),
        (P(0, 0), P(0, 0), "# é\n"),
        (P(2, 0), P(3, 4), "y = ("),
        (P(3, 1), P(3, 1), "\r\n    z"),
    ]
    for version, (start, end, new) in enumerate(edits, start=2):
        _notify(
            server,
            "lsp_text_document__did_change",
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[_change("", start, end, new)],
            ),
        )
        if version % 2:
            continue  # two versions fold into one re-parse
        text = document.text
        prep = pipeline.prepare(CompletionRequest(text, len(text), document_id=uri, language="python", version=version))
        fresh = syntax.ParsedDocument("python").update(text)
        assert prep.doc.text == text and str(prep.doc.tree.root_node) == str(fresh.tree.root_node)
    server.host.close()


def test_each_text_sync_notification_has_one_handler():
    # didChange was handled twice (the protocol override, then the acceptance tracker's own feature); pygls keeps
    # one feature per method, so a second home for any of these would now fail to register.
    from server.main import create_server

    server = create_server(Settings())
    for method in (types.TEXT_DOCUMENT_DID_OPEN, types.TEXT_DOCUMENT_DID_CHANGE, types.TEXT_DOCUMENT_DID_CLOSE):
        handler = server.protocol.fm.features[method]
        handler = getattr(handler, "func", handler)  # (pygls binds the server with functools.partial)
        assert handler.__module__ == "server.handlers_documents"
    server.host.close()
