"""Lines as LSP counts them: they end at "\\n", "\\r\\n" or "\\r" only (not at the form feeds, U+2028 and other
separators `str.splitlines` also breaks at), so a line number means the same to the editor, the server and the CLI."""

from __future__ import annotations

import re

_EOL = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Lines with their endings kept; the last element has no ending (possibly empty), so the position just past
    a final newline is a valid line."""
    if "\r" not in text:  # the common case, at C speed
        parts = text.split("\n")
        last = parts.pop()
        return [part + "\n" for part in parts] + [last]
    lines, start = [], 0
    for match in _EOL.finditer(text):
        lines.append(text[start : match.end()])
        start = match.end()
    lines.append(text[start:])
    return lines


def line_content(line: str) -> str:
    """The line without its ending."""
    if line.endswith("\r\n"):
        return line[:-2]
    if line.endswith(("\n", "\r")):
        return line[:-1]
    return line
