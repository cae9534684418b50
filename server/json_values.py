"""JSON values as the client sent them: the one reading of "is this JSON number an integer", and plain dicts and
lists from what pygls produced for an untyped payload (LSPAny)."""

from __future__ import annotations

import math
from typing import Any


def plain_json(value: Any) -> Any:
    """JSON-like Python values from whatever pygls produced for an untyped payload (LSPAny: dicts, namedtuples)."""
    if hasattr(value, "_asdict"):
        return {k: plain_json(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    return value


def json_integer(value: Any, low: float = -math.inf, high: float = math.inf) -> int | None:
    """The one reading of "is this JSON number an integer" (LSP fields, action data, command arguments, settings):
    an int, or a whole finite float (a JavaScript client's 3 may arrive as 3.0), within [low, high]; else None.
    A bool is not one (Python's bool is an int), nor 1.5, inf or nan (Python's JSON reads 1e400 and NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    number = int(value)
    return number if low <= number <= high else None
