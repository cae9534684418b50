"""The engine's settings come from the checkpoint's generation_config.json unless set explicitly, and every
result (and the log) says where each came from."""

from __future__ import annotations

import argparse
import json
import logging

import pytest

from infill.backends.choose import BackendSpec, add_model_options, open_backend, spec_from_args
from infill.engine.config import EngineConfig, EngineOverrides, resolve_engine_config
from infill.engine.diffusion import DiffusionEngine
from infill.engine.loading import load_diffusion_model
from infill.testing.tiny_checkpoint import write_tiny_checkpoint
from infill.types import InfillError, InfillRequest

CHECKPOINT_SAMPLER = {
    "max_denoising_steps": 5,
    "t_min": 0.2,
    "t_max": 0.6,
    "stability_threshold": 2,
    "confidence_threshold": 0.01,
    "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 0.3},
}


@pytest.fixture(scope="module")
def tuned_checkpoint(tmp_path_factory):
    """A tiny checkpoint whose generation_config.json carries its own sampler settings, canvas 48."""
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("tuned-diffusiongemma"), canvas_length=48)
    gen = path / "generation_config.json"
    gen.write_text(json.dumps({**json.loads(gen.read_text()), **CHECKPOINT_SAMPLER}))
    return path


@pytest.mark.parametrize("load_format", ["auto", "dummy"])
def test_the_checkpoints_generation_config_sets_the_engine(tuned_checkpoint, load_format, caplog):
    with caplog.at_level(logging.INFO, logger="infill.engine.diffusion"):
        engine = DiffusionEngine(load_diffusion_model(str(tuned_checkpoint), load_format=load_format))
    c = engine.config
    assert (
        c.max_denoising_steps,
        c.t_min,
        c.t_max,
        c.stability_threshold,
        c.confidence_threshold,
        c.entropy_bound,
        c.canvas_length,
    ) == (5, 0.2, 0.6, 2, 0.01, 0.3, 48)
    assert engine.config_sources["max_denoising_steps"] == "generation_config.json"
    assert engine.config_sources["canvas_length"] == "config.json"
    assert "max_denoising_steps=5 (generation_config.json)" in caplog.text
    result = engine.infill(InfillRequest(prefix="def add(a, b):\n    return ", suffix="\n"))
    assert result.outcome in ("ok", "empty"), result.error
    assert result.steps == 5  # the checkpoint's cap ran (random weights never stop early), not the default 48
    assert result.versions["max_denoising_steps"] == 5
    assert result.versions["settings_from"]["entropy_bound"] == "generation_config.json"


def test_explicit_settings_override_the_checkpoint(tuned_checkpoint):
    loaded = load_diffusion_model(str(tuned_checkpoint))
    engine = DiffusionEngine(loaded, EngineConfig(max_denoising_steps=3))
    assert engine.config.max_denoising_steps == 3 and engine.config_sources["max_denoising_steps"] == "explicit"
    assert engine.config.t_min == 0.2  # the rest still from the checkpoint
    result = engine.infill(InfillRequest(prefix="x = ", suffix="\n"))
    assert result.steps == 3 and result.versions["settings_from"]["max_denoising_steps"] == "explicit"
    # A whole EngineConfig cannot say "the default, explicitly"; a mapping can.
    resolved = resolve_engine_config(loaded.model.generation_config, loaded.model.config, {"max_denoising_steps": 48})
    assert resolved.config.max_denoising_steps == 48 and resolved.sources["max_denoising_steps"] == "explicit"
    assert DiffusionEngine(loaded, resolved).config.max_denoising_steps == 48


def test_a_checkpoint_without_sampler_settings_gets_transformers_defaults(tiny_engine):
    engine = DiffusionEngine(tiny_engine.loaded)
    assert engine.config_sources["t_max"] == "default" and engine.config.t_max == 0.8
    assert engine.config.max_denoising_steps == 48 and engine.config_sources["max_denoising_steps"] == "default"


def test_an_impossible_combination_is_a_clear_error(tuned_checkpoint):
    loaded = load_diffusion_model(str(tuned_checkpoint))
    with pytest.raises(InfillError, match="t_min < t_max.*t_max': 'explicit'"):  # below the checkpoint's t_min 0.2
        resolve_engine_config(loaded.model.generation_config, loaded.model.config, {"t_max": 0.1})
    with pytest.raises(InfillError, match="unknown engine settings: steps"):
        resolve_engine_config(loaded.model.generation_config, loaded.model.config, {"steps": 4})


def test_a_mapping_of_explicit_settings_goes_straight_to_the_engine(tuned_checkpoint):
    engine = DiffusionEngine(load_diffusion_model(str(tuned_checkpoint)), {"max_denoising_steps": 48})
    assert engine.config.max_denoising_steps == 48 and engine.config_sources["max_denoising_steps"] == "explicit"
    assert engine.config.t_max == 0.6  # the checkpoint's


def open_from_command_line(options: list[str]):
    """The engine as every command opens it: the shared model options → BackendSpec → open_backend."""
    parser = argparse.ArgumentParser()
    add_model_options(parser)
    return open_backend(spec_from_args(parser.parse_args(options)))


def test_an_explicit_step_cap_wins_over_the_checkpoint_even_at_the_default_value(tuned_checkpoint, caplog):
    """`--denoising-steps 48` is 48 steps although the checkpoint says 5 and 48 is EngineConfig's default (it once
    went through an EngineConfig, where a value equal to the default reads as not given); without the option the
    checkpoint's 5 applies; the log and each result's versions say which."""
    with caplog.at_level(logging.INFO, logger="infill.engine.diffusion"):
        explicit = open_from_command_line(["--model", str(tuned_checkpoint), "--denoising-steps", "48"])
    assert explicit.config.max_denoising_steps == 48
    assert "max_denoising_steps=48 (explicit)" in caplog.text
    result = explicit.infill(InfillRequest(prefix="x = ", suffix="\n", max_middle_tokens=4))
    assert result.steps == 48 and result.versions["settings_from"]["max_denoising_steps"] == "explicit"
    assert result.versions["settings_from"]["t_max"] == "generation_config.json"  # the rest: the checkpoint's
    checkpoint = open_from_command_line(["--model", str(tuned_checkpoint)])
    assert checkpoint.config.max_denoising_steps == 5
    assert checkpoint.versions()["settings_from"]["max_denoising_steps"] == "generation_config.json"


def test_without_explicit_settings_or_checkpoint_ones_the_defaults_apply(tiny_checkpoint):
    engine = open_from_command_line(["--model", str(tiny_checkpoint)])
    assert engine.config.max_denoising_steps == EngineConfig().max_denoising_steps
    assert engine.versions()["settings_from"]["max_denoising_steps"] == "default"


def test_the_prompt_cache_bound_given_is_explicit(tiny_checkpoint):
    spec = BackendSpec.from_env(model=str(tiny_checkpoint), kv_store_mib=3)
    assert spec.engine == EngineOverrides(kv_store_bytes=3 * 2**20)  # nothing else is carried as explicit
    engine = open_backend(spec)
    assert engine.prompts.stash_bytes == 3 * 2**20 and engine.config_sources["max_denoising_steps"] == "default"


def test_the_step_cap_help_says_where_the_default_comes_from():
    parser = argparse.ArgumentParser()
    add_model_options(parser)
    steps = next(a for a in parser._actions if a.dest == "denoising_steps")
    assert "generation_config.json" in steps.help and str(EngineConfig().max_denoising_steps) in steps.help


@pytest.mark.parametrize("steps,accepted", [(0, False), (1, True), (1024, True), (2000, False)])
def test_every_way_of_setting_the_step_cap_accepts_the_same_range(steps, accepted):
    """The command line (`--steps`), the LSP setting `denoisingSteps` and the engine take one range (the command
    line accepted 2000 steps where the setting refused them)."""
    from server.settings import Settings

    parser = argparse.ArgumentParser()
    add_model_options(parser)
    ways = {
        "command line": lambda: spec_from_args(parser.parse_args(["--steps", str(steps)])),
        "LSP setting": lambda: Settings(denoising_steps=steps),
        "engine config": lambda: EngineConfig(max_denoising_steps=steps),
    }
    verdicts = {}
    for way, make in ways.items():
        try:
            make()
            verdicts[way] = True
        except InfillError:
            verdicts[way] = False
    assert verdicts == dict.fromkeys(ways, accepted)
