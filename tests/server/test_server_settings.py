"""Settings (server/settings.py): unknown and ill-typed keys are problems, not failures."""

from __future__ import annotations

from server.settings import Settings, parse_settings


def test_settings_unknown_and_ill_typed_keys_are_problems_not_failures():
    settings, problems = parse_settings(
        {
            "debounceMs": 30,
            "enabled": "yes",
            "mystery": 1,
            "inlineBudgetMs": -5,
            "enabledLanguages": ["python"],
            "model": "",
        },
        Settings(),
    )
    assert settings.debounce_ms == 30 and settings.enabled is True and settings.enabled_languages == ("python",)
    assert settings.inline_budget_ms == Settings().inline_budget_ms and settings.model is None
    text = "\n".join(problems)
    assert "unknown setting infill.mystery" in text and "infill.enabled must be true or false" in text
    assert "inlineBudgetMs must be in" in text


def test_clean_layer_keeps_only_good_keys():
    from server.settings import clean_layer

    current = Settings(debounce_ms=40)
    layer, problems = clean_layer(
        {"infill": {"debounceMs": "slow", "maxMiddleTokens": 0, "model": "m", "x": 1}}, current
    )
    assert layer == {"model": "m"}
    assert [p.split(";")[-1].strip() for p in problems] == ["kept 40", "kept 64", "ignored"]


def test_settings_not_an_object():
    settings, problems = parse_settings(["x"], Settings())
    assert settings == Settings() and "must be an object" in problems[0]


def test_enabled_languages_are_compared_as_the_pipeline_reads_languages():
    # The gate compared the raw languageId, the pipeline the resolved one: `py`, or no language on `x.pyi`, was
    # Python to the pipeline and refused by `enabledLanguages: ["python"]`.
    settings = Settings(enabled_languages=("python",))
    assert settings.language_enabled("py") and settings.language_enabled("Python")
    assert settings.language_enabled("", "file:///src/stubs.pyi")
    assert not settings.language_enabled("markdown", "file:///README.md")
    assert not settings.language_enabled("", "file:///notes.txt")
    assert Settings(enabled_languages=("plaintext",)).language_enabled("plaintext", "file:///README.md")
