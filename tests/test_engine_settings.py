"""The engine's settings come from the checkpoint's generation_config.json unless set explicitly, and every
result (and the log) says where each came from."""

from __future__ import annotations

import json
import logging

import pytest

from infill.engine.config import EngineConfig, resolve_engine_config
from infill.engine.diffusion import DiffusionEngine
from infill.engine.loading import load_diffusion_model
from infill.testing.tiny_checkpoint import write_tiny_checkpoint
from infill.types import InfillError, InfillRequest

CHECKPOINT_SAMPLER = {"max_denoising_steps": 5, "t_min": 0.2, "t_max": 0.6, "stability_threshold": 2,
                      "confidence_threshold": 0.01,
                      "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 0.3}}


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
    assert (c.max_denoising_steps, c.t_min, c.t_max, c.stability_threshold, c.confidence_threshold,
            c.entropy_bound, c.canvas_length) == (5, 0.2, 0.6, 2, 0.01, 0.3, 48)
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
