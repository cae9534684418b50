"""The gateway without a `language` field (what generic FIM clients send): the language is detected from the text
around the gap, so the watchdog checks fills against the right grammar; prose stays without one."""

from __future__ import annotations

import json
import urllib.request

import pytest

from infill.context.syntax import GRAMMAR_LANGUAGES
from infill.gateway.language import DETECTED, _by_grammar, _window, detect_language

PYTHON = '''import os


def area(width, height):
    """The area of a rectangle."""
    if width < 0 or height < 0:
        raise ValueError("negative side")
    return width * height


class Box:
    def __init__(self, side):
        self.side = side

    def volume(self):
        return '''
PYTHON_AFTER = "\n\n\nprint(Box(2).volume())\n"

TYPESCRIPT = """interface Point {
  x: number;
  y: number;
}

export function distance(a: Point, b: Point): number {
  const dx: number = a.x - b.x;
  const dy: number = a.y - b.y;
  return Math.sqrt("""
GO = """package main

import "fmt"

type Point struct {
	X, Y int
}

func (p Point) String() string {
	return fmt.Sprintf("""
RUST = """use std::collections::HashMap;

pub struct Counter {
    counts: HashMap<String, usize>,
}

impl Counter {
    pub fn add(&mut self, word: &str) {
        *self.counts.entry(word.to_string()).or_insert(0) += 1;
    }

    pub fn get(&self, word: &str) -> usize {
        """
PROSE = """Meeting notes, Tuesday

We talked about the move to the new office. Everyone agreed that the kitchen needs a bigger fridge, and that
the meeting rooms should be booked through the shared calendar rather than by shouting across the floor.
Sam will ask the landlord about bicycle parking, and Priya will collect the questions people still have about
the lease before the end of the month. The next meeting is on """

UNCLOSED = '''from __future__ import annotations

import typing


def as_text(
    value: str | bytes, encoding: str | None = None, errors: str | None = None
) -> str:
    if isinstance(value, str):
        return value
    elif not isinstance(value, bytes):
        raise TypeError(f"cannot read a {type(value).__name__}")
    if encoding or errors:
        return value.decode(encoding or "utf-8"'''
UNCLOSED_AFTER = """
    return value.decode()


def as_bytes(
    value: str | bytes, encoding: str | None = None, errors: str | None = None
) -> bytes:
    if isinstance(value, bytes):
        return value
    elif not isinstance(value, str):
        raise TypeError(f"cannot write a {type(value).__name__}")
    if encoding or errors:
        return value.encode(encoding or "utf-8", errors=errors or "strict")
    return value.encode()
"""
NOTES = """## How the handler reads its settings

The handler keeps its settings on `self.settings`, and every field defaults to None when the client sent
nothing for it. When the server starts it reads the file, and if the file is missing it uses the defaults:
nothing else is read from the disk before the first request arrives at the server. The values are checked
in `__post_init__`, and a value that is not None and not of the right type is refused with a clear error:
"""


@pytest.mark.parametrize(
    "prompt, suffix, expected",
    [
        (PYTHON, PYTHON_AFTER, "python"),
        (TYPESCRIPT, "\n}\n", "typescript"),
        (GO, "\n}\n", "go"),
        (RUST, "\n    }\n}\n", "rust"),
        (PROSE, "\n", None),
        ("", "", None),
    ],
)
def test_language_is_detected_from_the_text_around_the_gap(prompt, suffix, expected):
    assert detect_language(prompt, suffix) == expected


def test_a_gap_inside_an_open_bracket_still_detects_python():
    prompt = PYTHON.replace("        return ", "        return sum(\n            self.side,\n            ")
    assert detect_language(prompt, PYTHON_AFTER) == "python"


def test_python_the_grammars_cannot_read_around_an_open_call_is_known_by_its_marks():
    """tree-sitter's Python grammar cannot recover around this gap (the call stays open), so no grammar fits;
    `def f(`, `elif`, `is not`-style marks and `from x import y` still say Python."""
    assert _by_grammar(_window(UNCLOSED, UNCLOSED_AFTER)) is None
    assert detect_language(UNCLOSED, UNCLOSED_AFTER) == "python"


def test_prose_that_names_python_constructs_stays_without_a_language():
    assert detect_language(NOTES, "\n") is None


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def noisy_gateway(pipeline, gateway_running):
    """The real gateway over the tiny random-weight DiffusionGemma: it writes noise, which never parses as code."""
    with gateway_running(pipeline) as server:
        yield server.url


def test_noise_in_python_without_a_language_is_not_returned(noisy_gateway):
    """Before detection, a generic client got the noise: no language, no grammar, no syntax check."""
    body = _post(noisy_gateway, {"prompt": PYTHON, "suffix": PYTHON_AFTER, "max_tokens": 16})
    assert body["choices"][0]["text"] == "", body
    assert any(reason == "syntax" for _, reason in body["infill"]["rejections"]), body["infill"]


def test_prose_without_a_language_still_gets_a_fill(noisy_gateway):
    body = _post(noisy_gateway, {"prompt": PROSE, "suffix": "\n", "max_tokens": 8})
    assert body["choices"][0]["text"].strip(), body


def test_every_grammar_but_prose_and_tsx_is_detected():
    # DETECTED is an ordered copy of the grammar keys (the order breaks ties): a grammar added to
    # infill/context/syntax.py must be added here too, or said why not.
    assert set(DETECTED) == GRAMMAR_LANGUAGES - {"markdown", "typescriptreact"}
    assert len(DETECTED) == len(set(DETECTED))
