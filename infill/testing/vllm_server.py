"""The real vLLM OpenAI server over a tiny random-weight DiffusionGemma, on this machine's CPU, for the integration
test (scripts/test-vllm.sh) and benchmarks/remote.py.

vLLM lives in its own venv (it pins torch and transformers differently from infill-ls); this module only writes the
checkpoint and runs `python -m vllm.entrypoints.openai.api_server` from that venv on 127.0.0.1. The CPU-only
settings (TRITON_INTERPRET=1, the stand-in Triton backend installed by the script) are test harness: a GPU server
needs none of them (docs/vllm.md).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# The sampler settings vLLM reads from generation_config.json (transformers' DiffusionGemma defaults; a freshly
# saved random model has them as null). 16 steps instead of 48 keeps the CPU test short.
VLLM_GENERATION = {
    "max_denoising_steps": 16,
    "t_min": 0.4,
    "t_max": 0.8,
    "stability_threshold": 1,
    "confidence_threshold": 0.005,
    "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 0.1},
}


def write_vllm_checkpoint(directory: str | Path, canvas_length: int = 32, seed: int = 0) -> Path:
    """A tiny checkpoint (infill.testing.tiny_checkpoint) whose generation config vLLM accepts."""
    from infill.testing.tiny_checkpoint import write_tiny_checkpoint

    directory = write_tiny_checkpoint(directory, seed=seed, canvas_length=canvas_length)
    path = directory / "generation_config.json"
    config = json.loads(path.read_text())
    config.update(VLLM_GENERATION)
    path.write_text(json.dumps(config, indent=2))
    return directory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class VLLMServer:
    """One vLLM server process. `exact_pins` switches the infill-vllm plugin on (INFILL_VLLM_EXACT_PINS=1)."""

    python: str  # the vLLM venv's interpreter
    model_dir: Path
    log_path: Path
    canvas_length: int = 32
    exact_pins: bool = True
    max_num_seqs: int = 4
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        diffusion = {"canvas_length": self.canvas_length, "max_denoising_steps": VLLM_GENERATION["max_denoising_steps"]}
        return [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--dtype",
            "float32",
            "--max-model-len",
            "512",
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--diffusion-config",
            json.dumps(diffusion),
            "--enforce-eager",
            "--language-model-only",
        ]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "INFILL_VLLM_EXACT_PINS"}
        # CPU test harness only: Triton kernels in Triton's interpreter, a small KV cache.
        env.update(
            TRITON_INTERPRET="1",
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            HF_HUB_OFFLINE="1",
        )
        if self.exact_pins:
            env["INFILL_VLLM_EXACT_PINS"] = "1"
        return env

    def start(self) -> VLLMServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env=self.environment(), start_new_session=True
        )
        return self

    def wait_ready(self, timeout_s: float) -> None:
        """Until /v1/models answers; raises with the log's tail when the process dies or time runs out."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1.0)
        raise RuntimeError(f"vLLM not ready within {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(line for line in text if not line.startswith("WARNING: Location"))[-lines * 200 :]

    def stop(self) -> None:
        """The whole process group (vLLM starts an engine-core child): TERM, then KILL after a grace period."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, 15)
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=10)
        except ProcessLookupError:
            pass

    def metric(self, name: str) -> float:
        """One counter from /metrics (summed over its label sets)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as reply:
            text = reply.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                head, _, value = line.rpartition(" ")
                if head == name or head.startswith(name + "{"):
                    total += float(value)
        return total
