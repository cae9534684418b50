"""A stand-in Triton backend named "cpu" (test harness only; see the package docstring)."""
