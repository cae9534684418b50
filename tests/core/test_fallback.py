"""The one decision of which fallback stands behind which primary (infill/loader.py `fallback_spec`), how it loads
(a fallback that cannot load leaves the primary serving; reloads and shutdown close both), and every entry point
asking it: the LSP server's settings, `infill-ls fill`, `infill-ls serve` and the pilot."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from lsp_helpers import refused_remote

from infill.backends.choose import BackendSpec
from infill.loader import NO_FALLBACK, FallbackChoice, fallback_from_args, fallback_spec, open_pipeline
from infill.pipeline import CompletionRequest, PipelineSettings
from server.backend_host import BackendHost, fallback_for
from server.settings import Settings, parse_settings

CHECKPOINT = BackendSpec(model="/models/dg", device="cuda", dtype="bfloat16", threads=3)
TEAM_SERVER = BackendSpec(endpoint="http://gpu-box:8765/v1")
OFFLINE = BackendSpec()
ENDPOINT = FallbackChoice(endpoint="http://fallback-box:8000/v1", endpoint_model="coder")


def test_a_checkpoint_or_a_remote_endpoint_gets_the_offline_default_behind_it_by_default():
    for primary in (CHECKPOINT, TEAM_SERVER):
        behind = fallback_spec(primary)
        assert behind is not None and behind.kind == "autoregressive", primary
        assert behind.device is None and behind.dtype is None  # on the CPU, whatever the checkpoint runs on
        assert behind.threads == primary.threads


def test_the_offline_default_has_nothing_behind_it_unless_an_endpoint_is_configured():
    assert fallback_spec(OFFLINE) is None  # the same model would write the same fill
    behind = fallback_spec(OFFLINE, ENDPOINT)
    assert behind is not None and behind.kind == "remote" and behind.endpoint == ENDPOINT.endpoint


def test_a_configured_endpoint_replaces_the_offline_default_and_off_means_none():
    for primary in (CHECKPOINT, TEAM_SERVER, OFFLINE):
        behind = fallback_spec(primary, ENDPOINT)
        assert (behind.kind, behind.endpoint, behind.endpoint_model) == ("remote", ENDPOINT.endpoint, "coder")
        assert fallback_spec(primary, NO_FALLBACK) is None
        assert fallback_spec(primary, FallbackChoice(enabled=False, endpoint=ENDPOINT.endpoint)) is None


def test_the_server_setting_is_typed_on_by_default_and_reloads_the_backend():
    assert fallback_for(Settings()) == FallbackChoice()
    off, problems = parse_settings({"fallback": False}, Settings())
    assert problems == [] and fallback_for(off) == NO_FALLBACK
    assert off.backend_key() != Settings().backend_key()  # turning it off reloads without the fallback
    kept, problems = parse_settings({"fallback": "no"}, off)
    assert kept.fallback is False and len(problems) == 1 and "infill.fallback must be true or false" in problems[0]
    endpoint = fallback_for(Settings(fallback_endpoint="http://fallback-box:8000/v1", fallback_model="coder"))
    assert endpoint == ENDPOINT


def test_the_command_line_options_of_serve_and_fill_make_the_same_choice():
    from infill.fill_cli import build_parser
    from infill.gateway.server import _parse_args

    assert fallback_from_args(_parse_args([])) == FallbackChoice()
    assert fallback_from_args(_parse_args(["--no-fallback"])) == NO_FALLBACK
    fill = build_parser().parse_args(
        ["f.py", "--at", "1:1", "--fallback-endpoint", ENDPOINT.endpoint, "--fallback-model", "coder"]
    )
    assert fallback_from_args(fill) == ENDPOINT


def test_a_fallback_that_cannot_load_leaves_the_primary_serving(tiny_checkpoint):
    """A fallback endpoint that is no URL fails to open (really: RemoteBackend refuses it); the checkpoint serves."""
    opened = open_pipeline(BackendSpec(model=str(tiny_checkpoint)), fallback=FallbackChoice(endpoint="ftp://not-http"))
    try:
        assert opened.pipeline.fallback is None and len(opened.backends) == 1
        assert "http(s) URL" in opened.fallback_error
        text = "The Tenant shall pay the Rent on the first day"
        assert opened.pipeline.complete(CompletionRequest(text, len(text))).result is not None
    finally:
        opened.backends[0].close()


def _wait(predicate, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_the_server_reports_a_fallback_that_failed_and_still_serves(tiny_checkpoint):
    events = []
    host = BackendHost(lambda state, message, fraction: events.append((state, message)))
    try:
        host.load(Settings(model=str(tiny_checkpoint), fallback_endpoint="ftp://not-http"))
        _wait(lambda: host.ready and host.fallback_state != "loading")
        assert host.fallback_info is None and "http(s) URL" in host.fallback_error
        assert host.fallback_state == "error" and host.info.kind == "diffusion"
        assert any("loading the fallback: ftp://not-http" in message for state, message in events)
        assert "no fallback" in events[-1][1] and events[-1][0] == "fallback"
    finally:
        host.close()


def test_reload_and_shutdown_close_the_primary_and_the_fallback():
    """Both backends real RemoteBackends (aimed at a port nothing listens on): each is closed exactly when the
    pipeline holding it is replaced, or the server shuts down."""
    opened = []

    def opener(spec, progress=None):
        backend = refused_remote()
        opened.append((spec.kind, backend))
        return backend

    host = BackendHost(lambda *event: None, opener=opener)
    try:
        host.load(Settings(remote_endpoint="http://127.0.0.1:9/v1"))
        _wait(lambda: host.ready and host.fallback_state == "ready")
        assert [kind for kind, _ in opened] == ["remote", "autoregressive"]  # the primary, then the fallback
        first = [backend for _, backend in opened]
        assert host.pipeline.fallback is first[1]
        host.load(Settings(remote_endpoint="http://127.0.0.1:9/v1", fallback=False))
        _wait(lambda: host.ready and len(opened) == 3 and host.pipeline.backend is opened[2][1])
        assert host.pipeline.fallback is None
        _wait(lambda: all(backend._closed for backend in first))  # closed on the model thread
        assert not opened[2][1]._closed
    finally:
        host.close()
    _wait(lambda: opened[2][1]._closed)


class GatedOpener:
    """Real RemoteBackends (aimed at a port nothing listens on); the fallback's (the offline default's spec) opens
    only once `gate` is set, as the offline default took minutes to load beside a CPU-heavy process (issue 51)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.opened: list[tuple[str, object]] = []

    def __call__(self, spec, progress=None):
        if spec.kind == "autoregressive":
            assert self.gate.wait(60), "the test never opened the gate"
        backend = refused_remote()
        self.opened.append((spec.kind, backend))
        return backend


def test_the_primary_serves_while_its_fallback_loads_then_the_fallback_is_swapped_in():
    gated = GatedOpener()
    events = []
    host = BackendHost(lambda state, message, fraction: events.append(state), opener=gated)
    try:
        host.load(Settings(remote_endpoint="http://127.0.0.1:9/v1"))
        _wait(lambda: host.ready)  # the fallback's opening is held: the primary serves alone
        alone = host.pipeline
        assert host.fallback_state == "loading" and alone.fallback is None and host.fallback_info is None
        alone.routes["none"] += 2  # what it served meanwhile (the counters a swap continues)
        gated.gate.set()
        _wait(lambda: host.fallback_state == "ready")
        assert host.pipeline is not alone and host.pipeline.backend is alone.backend  # the same primary ...
        assert host.pipeline.fallback is gated.opened[1][1] and host.pipeline.routes["none"] == 2  # ... continued
        assert events[-1] == "fallback" and "ready" in events
    finally:
        host.close()


@pytest.mark.parametrize("then", ["reload", "shutdown"])
def test_a_fallback_still_loading_at_a_reload_or_shutdown_is_closed_and_never_swapped_in(then):
    gated = GatedOpener()
    host = BackendHost(lambda *event: None, opener=gated)
    try:
        host.load(Settings(remote_endpoint="http://127.0.0.1:9/v1"))
        _wait(lambda: host.ready and host.fallback_state == "loading")
        if then == "reload":
            host.load(Settings(remote_endpoint="http://127.0.0.1:9/v1", fallback=False))
            _wait(lambda: host.ready and len(gated.opened) == 2)  # the new primary serves
        else:
            host.close()
        gated.gate.set()
        _wait(lambda: gated.opened[-1][0] == "autoregressive")  # the superseded fallback opens at last ...
        _wait(lambda: gated.opened[-1][1]._closed)  # ... and is closed
        if then == "reload":
            assert host.pipeline.backend is gated.opened[1][1] and host.pipeline.fallback is None
            assert host.fallback_state is None
            _wait(lambda: gated.opened[0][1]._closed)  # the old primary too
            assert not gated.opened[1][1]._closed
    finally:
        host.close()


@pytest.mark.slow
def test_infill_ls_fill_answers_from_the_fallback_and_says_so(stutter_checkpoint, tmp_path, capsys):
    from infill.fill_cli import main as fill_main

    source = tmp_path / "multiply.py"
    source.write_text("def add(a, b):\n    return a + b\n\n\ndef multiply(a, b):\n    return \n")
    args = [str(source), "--at", "6:12", "--json", "--model", str(stutter_checkpoint), "--steps", "4"]
    assert fill_main(args) == 0
    answered = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answered["route"] == "fallback" and answered["middle"].strip()
    assert answered["kind"] == "diffusion" and answered["answered_by"] == answered["fallback"]
    assert (
        answered["fallback"].startswith("gemma3-270m") and [answered["backend"], "repetition"] in answered["rejections"]
    )
    assert fill_main([*args, "--no-fallback"]) == 0
    alone = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert alone["route"] == "none" and alone["middle"] == "" and alone["fallback"] is None
    assert alone["answered_by"] is None and [r[1] for r in alone["rejections"]] == ["repetition"]


@pytest.mark.slow
def test_the_gateway_loads_the_fallback_and_its_response_names_the_backend_that_answered(stutter_checkpoint):
    from infill.gateway.server import _load_in_background, _parse_args, make_server

    args = _parse_args(["--port", "0", "--model", str(stutter_checkpoint)])
    server, backends = make_server(None, "127.0.0.1", 0), []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _load_in_background(server, BackendSpec(model=str(stutter_checkpoint)), fallback_from_args(args), backends)
        assert len(backends) == 2
        with httpx.Client(base_url=server.url, timeout=120) as http:
            body = http.post(
                "/v1/completions",
                json={"prompt": "def multiply(a, b):\n    return ", "suffix": "\n", "language": "python"},
            ).json()
        extension = body["infill"]
        assert extension["route"] == "fallback" and body["choices"][0]["text"].strip()
        assert extension["backend"] == backends[1].info.name != backends[0].info.name
        assert [backends[0].info.name, "repetition"] in extension["rejections"]
    finally:
        server.shutdown()
        server.server_close()
        for backend in backends:
            backend.close()


def test_the_pilot_keeps_fallbacks_explicit_and_asks_the_one_decision_for_them(tmp_path):
    from infill.pilot.report import _backend_section
    from infill.pilot.summary import summarise_backend
    from infill.pilot.targets import TargetPool, parse_target

    opened = []

    def open_fn(spec):
        opened.append(spec)
        return refused_remote()

    pool = TargetPool(PipelineSettings(), open_fn=open_fn)
    try:
        alone = pool.open(parse_target("diffusion:/models/dg"))
        behind = pool.open(parse_target("diffusion:/models/dg+fallback"))
        ar = pool.open(parse_target("ar+fallback"))
        assert alone.pipeline.fallback is None and alone.describe()["fallback"] is None
        assert behind.pipeline.backend is alone.pipeline.backend  # one engine per spec
        assert behind.pipeline.fallback is ar.pipeline.backend  # the offline default, one instance for both
        assert ar.pipeline.fallback is None  # nothing behind the offline default (the one decision)
        assert [spec.kind for spec in opened] == ["diffusion", "autoregressive"]
        assert behind.describe()["fallback"] == ar.pipeline.backend.info.name
        label = "diffusion:/models/dg"
        for target, said in (
            (alone, "- fallback: none, measured alone"),
            (behind, f"- fallback: {ar.pipeline.backend.info.name}"),
        ):
            report = "\n".join(_backend_section(label, target.describe(), summarise_backend(label, [], [], None), {}))
            assert said in report
    finally:
        pool.close()
