"""``publish-drained --pid-file``: where an operator, or a Slurm trigger's program, finds
the producer to signal (``kill -USR1 "$(cat PATH)"`` runs a pass now).

The contract (:class:`PidFile`):

* claimed at start, atomically: the file appears complete (``<pid>\\n``) or not at all,
  and two producers that start together cannot both hold it (``os.link`` of a finished
  temporary file, which fails if the name exists);
* a file naming a live process, or holding no pid (not a pid file), is refused with
  :class:`~.._errors.ConfigurationError` (``publish-drained`` then exits 2); one naming a
  process that no longer runs (a producer that was killed) is taken over;
* released at exit only if it still names this process, so a file that another producer
  took over, or an operator rewrote, is left alone.

The file belongs on a local filesystem (``/run/...``, ``/tmp/...``): its calls are not
bounded in time as those on the shared decision directory are.
"""

from __future__ import annotations

import contextlib
import os

from .._errors import ConfigurationError

__all__ = ["PidFile"]


class PidFile:
    """This process's pid in ``path`` from :meth:`claim` until :meth:`release`."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._pid = os.getpid()

    def claim(self) -> None:
        """Write this process's pid to the file; see the module doc.

        Raises:
            ConfigurationError: a live process holds the file, or it cannot be written
                (the message names the file and the fix).
        """
        temporary = f"{self.path}.{self._pid}.tmp"
        try:
            with open(temporary, "x", encoding="ascii") as stream:
                stream.write(f"{self._pid}\n")
            for _attempt in range(2):
                try:
                    os.link(temporary, self.path)
                    return
                except FileExistsError:
                    self._remove_stale()
            raise ConfigurationError(
                f"--pid-file {self.path}: another producer claimed it while this one started",
                setting="--pid-file",
            )
        except OSError as error:
            raise ConfigurationError(
                f"--pid-file {self.path} cannot be written ({error}): give a path in a "
                "writable local directory",
                setting="--pid-file",
            ) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)

    def release(self) -> None:
        """Remove the file if it still names this process; never raises for a file that
        is gone or unreadable."""
        with contextlib.suppress(OSError):
            if _read_pid(self.path) == self._pid:
                os.unlink(self.path)

    def _remove_stale(self) -> None:
        """Remove the existing file if the process it names no longer runs; else refuse."""
        try:
            holder = _read_pid(self.path)
        except FileNotFoundError:
            return  # removed meanwhile: link again
        if holder is None:
            raise ConfigurationError(
                f"--pid-file {self.path} exists and holds no pid: it is not a pid file; "
                "give another path, or remove it if it is left over",
                setting="--pid-file",
            )
        if _alive(holder):
            raise ConfigurationError(
                f"--pid-file {self.path} names process {holder}, which is running: another "
                "producer uses this file; stop it first, or give another --pid-file",
                setting="--pid-file",
            )
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _read_pid(path: str) -> int | None:
    """The pid in ``path``, or ``None`` if it holds no pid (empty, or not a number)."""
    with open(path, encoding="ascii", errors="replace") as stream:
        text = stream.read(32).strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stream:
            state = stream.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:
        return True  # it exists, whatever keeps it from being read
    return state not in ("Z", "X")
