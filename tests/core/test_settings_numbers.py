"""Every settings class checks its whole-number fields by one rule (infill/types.py `require_integers`): values that
JSON can carry but that are not whole numbers, or are below the field's bound, are refused with the field's name."""

from __future__ import annotations

import pytest

from infill.backends.offline.settings import ARSettings
from infill.checks.watchdog import WatchdogSettings
from infill.gateway.front import ConnectionLimits
from infill.pipeline import PipelineSettings
from infill.types import InfillError

# (settings class, a whole-number field, its least value)
FIELDS = [
    (WatchdogSettings, "max_chars", 1),
    (WatchdogSettings, "ngram_repeats", 2),
    (PipelineSettings, "prefix_chars", 1),
    (PipelineSettings, "max_gap_tokens", 1),
    (ARSettings, "max_prompt_tokens", 16),
    (ARSettings, "extra_context_tokens", 0),
    (ConnectionLimits, "max_per_client", 1),
]


@pytest.mark.parametrize(("settings", "name", "least"), FIELDS)
def test_whole_number_fields_refuse_what_is_not_one_and_keep_their_bound(settings, name, least):
    assert getattr(settings(**{name: least}), name) == least
    for bad in (least - 1, float(least) + 0.5, str(least), True, None):
        with pytest.raises(InfillError, match=rf"\b{name} must be .*got {bad!r}"):
            settings(**{name: bad})
