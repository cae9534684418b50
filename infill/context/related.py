"""What a gap may need from the user's other open files: a small, bounded outline ahead of the prompt.

A name the model must write is often defined in another open file (a method of a class from a sibling module, a
constant, a helper). Peers feed such text as extra context: llama.vim a ring of recently edited chunks, Continue and
Tabby snippets retrieved by shared names. Here the unit is one definition line, which says a name and how it is
called in a few tokens:
- each other document is read once per text (cached, not per keystroke) into its outline: `def`/`class` lines (a
  signature over several lines joined into one), assignments at the top level or in a class body, and the
  `self.x = ...` attributes a class sets, each with the class it belongs to;
- a gap's query is the names on the lines around it, but not on the line being typed, so the choice (and with it the
  start of the prompt, whose encoding is cached) stays put while one line is typed; the names the current file
  imports count too, since the window often no longer shows its imports;
- a line scores for defining an imported or nearby name, for belonging to a class named nearby, and for nearby names
  it uses; rarer names count more, and a file the current one imports by module name counts more. The best lines
  that fit the budget are printed per file in source order, under their classes, as stubs (`def f(x): ...`), each
  file under a comment naming it, then a comment naming the current file.
Selection is set lookups over the cached outlines: about 0.2 ms for four open files on a 2-core Xeon.
"""

from __future__ import annotations

import keyword
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from infill.languages import comment_markers, indent_width
from infill.types import InfillError

QUERY_LINES_BEFORE = 40  # lines above the gap whose names form the query
QUERY_LINES_AFTER = 12
MIN_NAME = 3  # shorter identifiers (i, x, ok, db) say too little about where they come from
IMPORTS_SCAN_CHARS = 20_000  # imports are looked for this far into the file
SIGNATURE_CHARS = 160  # a definition line's most characters
# Scores per name, times its rarity: what makes a definition line worth its tokens.
DEFINES_IMPORTED, DEFINES_NEARBY, MEMBER_OF_NEARBY, USES_NEARBY = 3.0, 2.0, 1.0, 0.5
IMPORTED_MODULE_BOOST = 1.5  # a file the current one imports by module name
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFINITION = re.compile(
    r"^(?P<indent>[ \t]*)(?:(?:export\s+)?(?:default\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?"
    r"(?P<kind>def|class|function|fn|func|struct|enum|trait|interface|type)\s+(?P<name>[A-Za-z_]\w*)"
    r"|(?:self|this)\.(?P<attr>[A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)"
    r"|(?:(?:export\s+)?(?:const|let|var)\s+)?(?P<var>[A-Za-z_]\w*)\s*(?:(?::[^=\n]*)?=(?!=)|:[^=\n]+$))"
)
_NOT_NAMES = frozenset({"default", "case", "else", "return", "export", "public", "private", "protected", "static"})
_IMPORTS = re.compile(
    r"^\s*(?:from\s+([.\w]+)\s+import|import\s+([.\w]+)|.*\bfrom\s+['\"]([^'\"]+)['\"]|"
    r".*\brequire\(['\"]([^'\"]+)['\"]\))",
    re.MULTILINE,
)
_COMMON = frozenset(
    """
self this cls None True False none true false null undefined return def class import from async await yield pass
else elif while for with try except finally raise lambda not and the function const let var new typeof instanceof
str int float bool list dict set tuple bytes object type len range print isinstance super args kwargs value values
key keys items name data result string number void any fn pub impl mut use struct enum match case Optional Any
require
""".split()
)


@dataclass(frozen=True)
class OpenDocument:
    """Another document the editor has open, as the caller knows it."""

    document_id: str
    name: str  # what the model is told the file is (a workspace-relative path or a file name)
    text: str
    version: int | None = None


@dataclass(frozen=True)
class RelatedSettings:
    max_chars: int = 900  # all lines together (about 250 tokens of code); 0 turns related code off
    max_lines: int = 16  # definition lines chosen (a class line shown above its members comes free)
    max_documents: int = 8  # other documents considered (the caller lists the most recently used first)

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_lines", "max_documents"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InfillError(f"related setting {name} must be an integer >= 0, got {value!r}")


@dataclass(frozen=True)
class _Line:
    """One definition line of an outline."""

    text: str  # as shown: stripped, a stub for a def/class (`def f(x): ...`)
    defines: str
    member_of: str  # the class it belongs to ("" at the top level)
    depth: int  # 0 at the top level, 1 in a class body
    names: frozenset[str]


@dataclass(frozen=True)
class _Outline:
    """One document's definition lines and, per name, the lines that hold it."""

    module: str  # the file's stem, to match imports
    lines: tuple[_Line, ...]
    holding: dict[str, tuple[int, ...]]
    class_line: dict[str, int]  # a class's own line, shown above its members

    @classmethod
    def of(cls, name: str, text: str) -> _Outline:
        lines = outline(text)
        holding: dict[str, list[int]] = {}
        for i, line in enumerate(lines):
            for n in line.names | {line.defines, line.member_of} - {""}:
                holding.setdefault(n, []).append(i)
        classes = {
            line.defines: i
            for i, line in enumerate(lines)
            if line.depth == 0 and line.text.startswith(("class ", "struct ", "interface ", "trait ", "export class "))
        }
        return cls(_module_of(name), lines, {n: tuple(ids) for n, ids in holding.items()}, classes)


def names_in(text: str) -> set[str]:
    return {n for n in _IDENT.findall(text) if len(n) >= MIN_NAME and n not in _COMMON}


def outline(text: str) -> tuple[_Line, ...]:
    """The definition lines of `text` (see the module docstring), each name once per class."""
    raw = text.splitlines()
    found, seen = [], set()
    owner, body = "", -1  # the top-level class the lines below belong to, and its body's indent (-1: not yet seen)
    for i, line in enumerate(raw):
        if not line.strip():
            continue
        indent = indent_width(line)
        if owner and body < 0:
            body = indent
        if owner and indent == 0:
            owner, body = "", -1
        match = _DEFINITION.match(line)
        if not match:
            continue
        kind, attr = match.group("kind"), match.group("attr")
        defines = match.group("name") or attr or match.group("var")
        if not defines or keyword.iskeyword(defines) or defines in _NOT_NAMES:
            continue
        member = owner if owner and (attr or indent == body) else ""
        if (attr and not owner) or (not attr and indent > 0 and not member):
            continue  # inside a function body: not part of the outline
        if kind in ("class", "struct", "interface", "trait") and indent == 0:
            owner, body, member = defines, -1, ""
        if (member, defines) in seen:
            continue
        seen.add((member, defines))
        shown = _signature(raw, i) if kind else line.strip()[:SIGNATURE_CHARS]
        found.append(_Line(shown, defines, member, 1 if member else 0, frozenset(names_in(shown))))
    return tuple(found)


def _signature(lines: list[str], i: int) -> str:
    """A definition's head as one line: up to its first `:` or `{` outside brackets, then a stub body."""
    head, depth = "", 0
    for line in lines[i : i + 8]:
        for char in line.strip():
            if char in "([":
                depth += 1
            elif char in ")]":
                depth -= 1
            elif depth <= 0 and char in ":{":
                tail = ": ..." if char == ":" else " { ... }"
                return (_tidy(head) + tail)[:SIGNATURE_CHARS]
            head += char
        head += " "
    return _tidy(head)[:SIGNATURE_CHARS]


def _tidy(head: str) -> str:
    """A signature written over several lines, as it would be on one."""
    head = re.sub(r"\s+", " ", head.strip())
    return re.sub(r",?\s*([)\]])", r"\1", re.sub(r"([(\[])\s+", r"\1", head))


def imports_of(text: str) -> tuple[set[str], set[str]]:
    """The module stems `text` imports and the names it imports from them (`from ._state import A, B as C`,
    `from x import (A,\n B)`, `import a.b`, `import {A} from './util'`)."""
    modules, names = set(), set()
    for match in _IMPORTS.finditer(text):
        spec = next((g for g in match.groups() if g), "")
        stem = re.split(r"[./]", spec.rstrip("./"))[-1] if spec else ""
        if stem:
            modules.add(stem)
            if match.group(3) or match.group(4):  # `import {A} from 'm'`, `const {A} = require('m')`
                names |= names_in(match.group(0).rsplit(spec, 1)[0])
                continue
            rest = text[match.end() : match.end() + 2000]
            names |= names_in(rest[: rest.find(")") + 1] if rest.lstrip().startswith("(") else rest.split("\n", 1)[0])
    return modules, names


def _module_of(name: str) -> str:
    base = re.split(r"[\\/]", name)[-1]
    return base.split(".")[0]


class RelatedFiles:
    """Chooses definition lines from other open documents for a gap. Thread-safe; outlines are cached per text."""

    def __init__(self, settings: RelatedSettings | None = None, max_outlines: int = 64) -> None:
        self.settings = settings or RelatedSettings()
        self._outlines: OrderedDict[tuple[str, int, int], _Outline] = OrderedDict()
        self._imports: OrderedDict[str, tuple[int, tuple[set[str], set[str]]]] = OrderedDict()
        self._max = max_outlines
        self._lock = threading.Lock()

    def _outline(self, doc: OpenDocument) -> _Outline:
        key = (doc.document_id, hash(doc.text), len(doc.text))
        with self._lock:
            found = self._outlines.get(key)
            if found is not None:
                self._outlines.move_to_end(key)
                return found
        made = _Outline.of(doc.name, doc.text)
        with self._lock:
            self._outlines[key] = made
            while len(self._outlines) > self._max:
                self._outlines.popitem(last=False)
        return made

    def _imports_before(self, text: str, start: int, document_id: str | None) -> tuple[set[str], set[str]]:
        """What the text imports above the gap, cached per document by the hash of the text scanned."""
        head = text[: min(start, IMPORTS_SCAN_CHARS)]
        key, digest = document_id or "", hash(head)
        with self._lock:
            cached = self._imports.get(key)
            if cached is not None and cached[0] == digest:
                return cached[1]
        found = imports_of(head)
        with self._lock:
            self._imports[key] = (digest, found)
            while len(self._imports) > self._max:
                self._imports.popitem(last=False)
        return found

    def select(
        self,
        others: Sequence[OpenDocument],
        text: str,
        start: int,
        end: int,
        language: str | None,
        name: str | None = None,
        document_id: str | None = None,
    ) -> str:
        """The extra context for the gap text[start:end] ("" when nothing relevant is open)."""
        s = self.settings
        others = [d for d in others if d.document_id != document_id and d.text.strip()][: s.max_documents]
        if not others or s.max_chars == 0 or s.max_lines == 0:
            return ""
        modules, imported = self._imports_before(text, start, document_id)
        query = names_in(_around(text, start, end))
        wanted = query | imported
        if not wanted:
            return ""
        outlines = [self._outline(doc) for doc in others]
        total = sum(len(o.lines) for o in outlines) or 1
        scores: dict[tuple[int, int], float] = {}
        for d, o in enumerate(outlines):
            boost = IMPORTED_MODULE_BOOST if o.module in modules else 1.0
            for n in wanted:
                holders = o.holding.get(n, ())
                weight = math.log(1 + total / len(holders)) * boost if holders else 0.0
                for i in holders:
                    line = o.lines[i]
                    gain = (
                        (DEFINES_IMPORTED if n == line.defines and n in imported else 0.0)
                        + (DEFINES_NEARBY if n == line.defines and n in query else 0.0)
                        + (MEMBER_OF_NEARBY if n == line.member_of else 0.0)
                        + (USES_NEARBY if n in line.names and n != line.defines and n in query else 0.0)
                    )
                    scores[(d, i)] = scores.get((d, i), 0.0) + gain * weight
        ranked = sorted((key for key, score in scores.items() if score > 0), key=lambda k: (-scores[k], k))
        return self._render(others, outlines, ranked, language, name)

    def _render(
        self,
        others: Sequence[OpenDocument],
        outlines: list[_Outline],
        ranked: list[tuple[int, int]],
        language: str | None,
        name: str | None,
    ) -> str:
        """The chosen lines per file in source order, members under their class line, within the budget."""
        s, marker = self.settings, _line_comment(language)
        chosen: dict[int, set[int]] = {}
        used = count = 0
        for d, i in ranked:
            if count == s.max_lines:
                break
            o, adds = outlines[d], {i}
            owner = o.lines[i].member_of
            if owner and owner in o.class_line:
                adds.add(o.class_line[owner])
            adds -= chosen.get(d, set())
            cost = sum(len(o.lines[j].text) + 5 for j in adds) + (0 if d in chosen else len(others[d].name) + 4)
            if used + cost > s.max_chars:
                continue
            chosen.setdefault(d, set()).update(adds)
            used, count = used + cost, count + 1
        if not chosen:
            return ""
        blocks = []
        for d in sorted(chosen):
            o = outlines[d]
            body = "\n".join("    " * o.lines[j].depth + o.lines[j].text for j in sorted(chosen[d]))
            blocks.append(f"{marker} {others[d].name}\n{body}\n\n")
        return "".join(blocks) + (f"{marker} {name}\n" if name else "")


def _around(text: str, start: int, end: int) -> str:
    """The lines around a gap, without the line(s) the gap is on."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    before_from = line_start
    for _ in range(QUERY_LINES_BEFORE):
        if before_from == 0:
            break
        before_from = text.rfind("\n", 0, before_from - 1) + 1
    after_to = line_end
    for _ in range(QUERY_LINES_AFTER):
        if after_to >= len(text):
            break
        nxt = text.find("\n", after_to + 1)
        after_to = len(text) if nxt < 0 else nxt
    return text[before_from:line_start] + text[line_end:after_to]


def _line_comment(language: str | None) -> str:
    markers = comment_markers(language)
    return markers[0] if markers and markers[0] in ("#", "//", "--", ";") else "//" if markers else "#"
