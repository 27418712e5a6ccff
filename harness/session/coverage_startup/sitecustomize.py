"""Start-up of the Python processes a test starts under ``--cov``: coverage pauses while
``torch`` imports.

- ``conftest.py`` puts this folder first on those processes' ``PYTHONPATH``. Python
  imports ``sitecustomize`` at start-up, after coverage's ``.pth`` file started measuring.
- torch's import runs no line of the package. Under coverage's tracer it costs about
  0.3 s more CPU than its 1.1 s, and a whole job starts dozens of such processes.

Rules:

- Only the first ``import torch``, only in a process with one thread and one tracer:
  a pause stops every tracer, and resuming restarts each on the calling thread.
- The pause and resume are coverage's collector's (7.17, pinned by the test extra). They
  keep the tracer's record of the frames around the import, so the importing module's
  next lines are still measured.
- Without coverage, or with another coverage inside, the process starts as it would.
- Another ``sitecustomize`` earlier on the path wins (a test's patch): that process is
  measured without the pause.
"""

from __future__ import annotations

import sys
import threading
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType


class _PauseWhileTorchImports(MetaPathFinder):
    """Finds ``torch`` through the other finders, then wraps its loader's
    ``exec_module`` in a pause of ``collector``; removes itself on that first call."""

    def __init__(self, collector) -> None:
        self._collector = collector

    def find_spec(self, fullname: str, path=None, target=None) -> ModuleSpec | None:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        collector = self._collector

        def exec_module(module: ModuleType) -> None:
            del loader.exec_module  # the class's method again, for any later use
            paused = len(collector.tracers) == 1 and threading.active_count() == 1
            if paused:
                collector.pause()
            try:
                loader.exec_module(module)
            finally:
                if paused:
                    collector.resume()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _install() -> None:
    try:
        import coverage
    except ImportError:
        return
    current = coverage.Coverage.current()
    collector = getattr(current, "_collector", None)
    if "torch" in sys.modules or not all(
        hasattr(collector, name) for name in ("tracers", "pause", "resume")
    ):
        return
    sys.meta_path.insert(0, _PauseWhileTorchImports(collector))


_install()
