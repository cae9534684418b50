"""The offline default: Gemma 3 270M on llama.cpp (`backend.py`), from the GGUF on PyPI (`model_file.py`)."""
