"""What a client may send that the server never produced (issue 24): params of every JSON type (null too) on every
method the server registers, code-action resolve data of every shape, command arguments of every shape. Each generator
returns (kind, method, raw params): "edge_params" is owed -32602, "edge_resolve" a result without an edit,
"invalid" any answer that is not an internal error (session.py checks them)."""

from __future__ import annotations

import json
import random
from functools import lru_cache

NON_OBJECTS = [
    '"x"',
    '"{\\"textDocument\\": {}}"',
    "[]",
    "[1, 2]",
    '[{"a": 1}]',
    "0",
    "-1",
    "1.5",
    "1e400",
    "true",
    "false",
]
ODD_VALUES = ['["gap"]', '{"a": 1}', "[[0]]", "null", "true", "1.5", "1e400", '"gap"', "-1", "[]", "{}"]
COMMANDS = [
    "infill.fillGap",
    "infill.fillAllGaps",
    "infill.toggle",
    "infill.status",
    "infill.didAcceptCompletion",
    "infill.nope",
]


@lru_cache(maxsize=1)
def registered_methods() -> tuple[str, ...]:
    """Every method the real server registers (built-ins and infill's), except exit, read off a server object."""
    from server.main import create_server
    from server.settings import Settings

    protocol = create_server(Settings()).protocol
    methods = set(protocol.fm.builtin_features) | set(protocol.fm.features) | {"$/cancelRequest"}
    return tuple(sorted(methods - {"exit"}))


def edge_request(rng: random.Random, uri: str) -> tuple[str, str, str]:
    roll = rng.random()
    if roll < 0.35:
        return "edge_params", rng.choice(registered_methods()), rng.choice(NON_OBJECTS)
    if roll < 0.4:  # null params: refused where the method needs an object, valid where its params are optional
        return "invalid", rng.choice([m for m in registered_methods() if m != "shutdown"]), "null"
    if roll < 0.75:
        return (
            "edge_resolve",
            "codeAction/resolve",
            f'{{"title": "Fill gap", "kind": "refactor.rewrite", "data": {resolve_data(rng, uri)}}}',
        )
    return (
        "invalid",
        "workspace/executeCommand",
        f'{{"command": {json.dumps(rng.choice(COMMANDS))}, "arguments": {command_arguments(rng, uri)}}}',
    )


def resolve_data(rng: random.Random, uri: str) -> str:
    """Data shaped like the server's own ({infill, uri, range, generation, version, text}) with one or more fields
    replaced by a value of another type, or not an object at all."""
    if rng.random() < 0.15:
        return rng.choice(ODD_VALUES)
    fields = {
        "infill": json.dumps(rng.choice(["gap", "gaps"])),
        "uri": json.dumps(uri),
        "range": "[0, 0, 0, 1]",
        "generation": '"s:1"',
        "version": "1",
        "text": '"abc"',
    }
    for name in rng.sample(sorted(fields), rng.randint(1, 3)):
        if rng.random() < 0.2:
            del fields[name]
        else:
            fields[name] = rng.choice(ODD_VALUES + ["[0, 0, 0]", "[0, 0, 0, 1, 2]", '[0, "1", 0, 1]'])
    return "{" + ", ".join(f'"{name}": {value}' for name, value in fields.items()) + "}"


def command_arguments(rng: random.Random, uri: str) -> str:
    range_ = '{"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}'
    return rng.choice(
        [
            '[{"a": 1}]',
            "[[1]]",
            "[null, null]",
            "[1.5]",
            '[{"uri": {"a": 1}}]',
            "[]",
            "null",
            '"ab"',
            '{"a": 1}',
            f'[{json.dumps(uri)}, "x"]',
            f'[{json.dumps(uri)}, {{"start": [0]}}]',
            f'[{{"uri": {json.dumps(uri)}, "range": {range_}, "version": {rng.choice(ODD_VALUES)}}}]',
            f'[{{"uri": {json.dumps(uri)}, "range": {range_}, "generation": {rng.choice(ODD_VALUES)}}}]',
            f"[{rng.choice(ODD_VALUES)}]",
        ]
    )
