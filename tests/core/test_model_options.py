"""One set of model options for `infill-ls`, `infill-ls serve`, `infill-ls fill` and `infill-ls pilot`: the same
spellings, the same checks, the same BackendSpec (three argparsers once defined them apart, with different names
for the step cap and options missing from some)."""

from __future__ import annotations

import pytest

from infill.backends.choose import spec_from_args
from infill.fill_cli import build_parser as fill_parser
from infill.gateway.server import _parse_args as serve_args
from infill.pilot.cli import build_parser as pilot_parser
from infill.types import InfillError
from server.main import build_parser as lsp_parser
from server.main import main as lsp_main

OPTIONS = ["--device", "cpu", "--dtype", "bf16", "--denoising-steps", "12", "--threads", "2", "--quantization", "fp8"]


def parse_all(options: list[str], pilot: bool = True):
    """The same options through each command's parser (with the arguments each requires)."""
    parsed = {
        "infill-ls": lsp_parser().parse_args(options),
        "serve": serve_args(options),
        "fill": fill_parser().parse_args(["f.py", "--at", "1:1", *options]),
    }
    if pilot:  # the pilot names its models with --backend: it takes every option but the choice of model
        parsed["pilot"] = pilot_parser().parse_args(["src", "--out", "out", *options])
    return parsed


def test_every_command_reads_the_model_options_into_the_same_spec(monkeypatch):
    monkeypatch.delenv("INFILL_MODEL", raising=False)
    specs = {name: spec_from_args(args) for name, args in parse_all(OPTIONS).items()}
    for name, spec in specs.items():
        assert (spec.device, spec.dtype, spec.engine.max_denoising_steps, spec.threads, spec.quantization) == (
            "cpu",
            "bf16",
            12,
            2,
            "fp8",
        ), name
    chosen = {
        name: spec_from_args(args)
        for name, args in parse_all(["--model", "ckpt", "--load-format", "dummy"], pilot=False).items()
    }
    assert {(s.model, s.load_format) for s in chosen.values()} == {("ckpt", "dummy")}


def test_older_spellings_of_the_step_cap_still_work():
    assert fill_parser().parse_args(["f.py", "--at", "1:1", "--steps", "4"]).denoising_steps == 4
    assert pilot_parser().parse_args(["src", "--out", "o", "--diffusion-steps", "4"]).denoising_steps == 4


@pytest.mark.parametrize(
    ("bad", "says"), [(["--threads", "0"], "positive integer"), (["--denoising-steps", "0"], "integer in 1..1024")]
)
def test_bad_values_are_refused_alike(bad, says, capsys):
    for _name, args in parse_all(bad).items():
        with pytest.raises(InfillError, match=says):
            spec_from_args(args)
    assert lsp_main(bad) == 2 and says in capsys.readouterr().err
