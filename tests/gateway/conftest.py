"""Fixtures of the gateway's tests (the one way a test starts a real gateway, `gateway_running`, is the whole
suite's: tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from infill.pipeline import Pipeline


@pytest.fixture(scope="module")
def pipeline(tiny_engine: Any) -> Pipeline:
    """The pipeline over the tiny random DiffusionGemma, as an editor's requests would meet it."""
    return Pipeline(tiny_engine)
