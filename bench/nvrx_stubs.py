"""NVRx 0.7.0's barrier rendezvous, in-process, for the scale bench only (never a dependency).

NVRx is third-party. :func:`obtain` installs its wheel with ``pip install --no-deps
--target`` into :data:`DEFAULT_DIR` (under ``.venv/``, ignored by git), apart from the
product's environment. Only a CPython 3.12 manylinux_2_39 wheel exists; its pure-Python
rendezvous runs here, its binary parts are never imported.

:func:`load` puts minimal stubs in ``sys.modules`` first. None is on the store's path:

* ``psutil``: an empty module (used only by process-liveness helpers).
* ``fault_tolerance`` and ``inprocess``: bare packages, their ``__init__`` skipped.
* ``fault_tolerance.launcher``: the IPC socket's name, ``UnhealthyNodeException``,
  ``get_node_health_check() -> None`` (its real default).
* ``fault_tolerance.ipc_connector``: an ``IpcConnector`` without a socket or messages.
* ``shared_utils.health_check``: the GPU check says healthy; the others are off by default.
* ``fault_tolerance.cycle_info_writer``: unused without ``cycle_info_dir``.
* the handler's SIGTERM/SIGINT handlers: no-ops (``signal.signal`` needs the main thread).
* ``set_worker_group``: a dummy whose ``spec.local_world_size`` is 1 (asserted on).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_DIR", "REQUIREMENT", "handler", "load", "obtain"]

REQUIREMENT = "nvidia-resiliency-ext==0.7.0"
DEFAULT_DIR = Path(__file__).resolve().parent.parent / ".venv" / "bench-nvrx-0.7.0"
_PACKAGE = "nvidia_resiliency_ext"
_BARRIER = f"{_PACKAGE}.fault_tolerance.ft_rendezvous_barrier"


def obtain(directory: Path) -> str | None:
    """Install NVRx into ``directory`` unless it is there; ``None``, or why it is not."""
    if (directory / _PACKAGE / "fault_tolerance" / "ft_rendezvous_barrier.py").exists():
        return None
    command = [
        *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"),
        *("--target", str(directory), "--only-binary=:all:"),
        *("--platform", "manylinux_2_39_x86_64", "--python-version", "3.12", REQUIREMENT),
    ]
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"pip failed: {error}"
    if done.returncode != 0:
        return f"pip install {REQUIREMENT} failed: {done.stderr.strip()[-300:]}"
    return None


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def _package(name: str, directory: Path) -> None:
    """A package whose ``__init__`` is not run: its submodules import from ``directory``."""
    _module(name, __path__=[str(directory)])


class _Unhealthy(Exception):
    """Stands for ``fault_tolerance.launcher.UnhealthyNodeException``."""


class _Ipc:
    """``IpcConnector`` without a socket: no rank ever sends a request."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path

    def start_receiving(self) -> None:
        pass

    def stop_receiving(self) -> None:
        pass

    def fetch_received(self) -> list[Any]:
        return []

    def send(self, message: Any) -> None:
        pass


class _Check:
    """A health check that is off, or (the GPU check) healthy without a GPU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self) -> bool:
        return True

    def start_poller(self, *args: Any, **kwargs: Any) -> None:
        pass


def load(directory: Path) -> types.ModuleType:
    """NVRx's ``ft_rendezvous_barrier`` from ``directory``, with the stubs above."""
    if _BARRIER in sys.modules:
        return sys.modules[_BARRIER]
    root = directory / _PACKAGE
    sys.path.insert(0, str(directory))
    os.environ.setdefault("NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE", "1")  # one address for all
    _module("psutil")
    importlib.import_module(_PACKAGE)  # its __init__ reads only its version
    _package(f"{_PACKAGE}.fault_tolerance", root / "fault_tolerance")
    _package(f"{_PACKAGE}.inprocess", root / "inprocess")
    ft = f"{_PACKAGE}.fault_tolerance"
    _module(
        f"{ft}.launcher",
        FT_LAUNCHER_IPC_SOCKET=f"/tmp/_ft_launcher{os.getpid()}.socket",
        UnhealthyNodeException=_Unhealthy,
        get_node_health_check=lambda: None,
    )
    _module(f"{ft}.ipc_connector", IpcConnector=_Ipc)
    _module(
        f"{_PACKAGE}.shared_utils.health_check",
        AttributionService=_Check,
        DistributedStorageHealthCheck=_Check,
        GPUHealthCheck=_Check,
        NicLinkStateHealthCheck=_Check,
        StoragePathHealthCheck=_Check,
    )
    _module(
        f"{ft}.cycle_info_writer",
        CycleInfoReporter=_Check,
        CycleInfoRoundSnapshot=_Check,
        cycle_log_file=lambda base, index: base,
    )
    barrier = importlib.import_module(_BARRIER)
    # no signal.signal outside the main thread
    setattr(barrier, "_install_rdzv_signal_handlers", dict)  # noqa: B010
    setattr(barrier, "_restore_rdzv_signal_handlers", lambda previous: None)  # noqa: B010
    return barrier


def handler(barrier: types.ModuleType, store: Any, params: Any) -> Any:
    """NVRx's handler over ``store``, as its launcher builds it, with a dummy worker group."""
    made = barrier.create_handler(store, None, params)
    spec = types.SimpleNamespace(local_world_size=1)
    made.set_worker_group(types.SimpleNamespace(spec=spec))
    return made
