"""A backend wrapper for tests: the real engine, with what reached it written down."""

from __future__ import annotations

import threading

from infill.types import UNSTEERED


class Recording:
    """The real engine, with the requests the pipeline hands it written down (what reached the model)."""

    def __init__(self, engine) -> None:
        self.engine, self.infills, self.warms, self.results = engine, [], [], []
        self.started = threading.Event()  # set by every infill call (clear it to wait for the next)

    @property
    def info(self):
        return self.engine.info

    def infill(self, request, control=UNSTEERED):
        self.infills.append(request)
        self.started.set()
        result = self.engine.infill(request, control)
        self.results.append(result)
        return result

    def warm(self, request, **kwargs):
        self.warms.append(request)
        return self.engine.warm(request, **kwargs)

    def close(self) -> None:
        pass
