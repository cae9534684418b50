"""infill: the engine of infill-ls (model loading, canvas, denoising loop, KV store, context, watchdog).

No LSP imports here: the server in `server/` is a thin layer over this package.
"""

__version__ = "0.1.0"
