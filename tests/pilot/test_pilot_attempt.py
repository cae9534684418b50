"""Scoring one pilot attempt (infill/pilot/attempt.py) through the real Pipeline, with a test double in place of a
model (it answers what each test scripts, and records what it was sent): the middle never reaches the backend, and
exact match, edit similarity, syntax and acceptance are what a hand computation says."""

from __future__ import annotations

from infill.metrics import AcceptRule
from infill.pilot.attempt import run_attempt
from infill.pilot.holes import Hole
from infill.pipeline import Pipeline
from infill.types import UNSTEERED, BackendInfo, CancelToken, InfillResult

PREFIX = "def area(width, height):\n    result = "
MIDDLE = "width * height"
SUFFIX = "\n    return result\n"


class ScriptedModel:
    """Answers `middle` to every request and keeps the requests."""

    def __init__(self, middle: str) -> None:
        self.middle = middle
        self.requests: list = []

    @property
    def info(self) -> BackendInfo:
        return BackendInfo(name="scripted", kind="remote", model="scripted")

    def infill(self, request, control=UNSTEERED) -> InfillResult:
        self.requests.append(request)
        return InfillResult(middles=(self.middle,), outcome="ok", backend="scripted")

    def close(self) -> None:
        pass


def attempt(answer: str) -> tuple[dict, ScriptedModel]:
    model = ScriptedModel(answer)
    hole = Hole(
        id="h1",
        path="geometry.py",
        language="python",
        kind="single-line",
        line=2,
        prefix=PREFIX,
        middle=MIDDLE,
        suffix=SUFFIX,
        mode="inline",
    )
    return run_attempt(Pipeline(model), hole, "geometry.py", AcceptRule(), CancelToken(), 30), model


def test_the_middle_never_reaches_the_backend_and_a_right_answer_scores_as_one():
    record, model = attempt(MIDDLE)
    (request,) = model.requests
    assert MIDDLE not in request.prefix + request.suffix
    assert request.prefix.endswith("result = ") and request.suffix.startswith("\n    return result")
    assert record["shown"] and record["predicted"] == MIDDLE and not record["touched_fixed_text"]
    assert record["exact_match"] and record["edit_similarity"] == 1.0
    assert record["syntax_valid"] is True and record["accepted"] and record["error"] is None


def test_a_wrong_answer_scores_by_its_edit_distance():
    record, _ = attempt("width + height")  # one substitution in 14 characters
    assert record["shown"] and not record["exact_match"]
    assert record["edit_similarity"] == round(1 - 1 / 14, 4) and record["accepted"]  # 0.93 >= 0.7
    far, _ = attempt("w")  # 13 deletions in 14
    assert far["edit_similarity"] == round(1 - 13 / 14, 4) and not far["accepted"]


def test_nothing_shown_scores_nothing():
    record, _ = attempt("")
    assert not record["shown"] and not record["exact_match"] and not record["accepted"]
    assert record["predicted"] == "" and record["syntax_valid"] is None and record["edit_similarity"] == 0.0
