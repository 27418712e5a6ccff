"""``publish-drained --pid-file``: where a trigger finds the producer to wake with SIGUSR1.

It also says how a sender can tell that the pid is the producer's.

docs/operators.md, "A pass now", tells the story. The rules (:class:`PidFile`):

- The lock vouches for the pid. The producer holds an exclusive ``flock`` on the file from
  :meth:`PidFile.claim` until it ends, however it ends.
- The file is 0600: no account but root and the producer's can open it, so none can lock it.
- The file appears complete and locked, or not at all, and its content never changes.
- A file whose lock is free is stale, whatever process its pid names now. So is a file
  others can open (an earlier release's 0644) whose locks no running producer holds.
- Only root's or this account's folders and symlinks lead to the file's folder
  (:func:`~.pidfolder.open_folder`): a root-run trigger trusts what is there.
- Every call on the file is made in the folder opened and checked at the claim.
- An existing file that is not this account's regular file, holds no pid or is held is
  refused at once with :class:`~.._errors.ConfigurationError`.
- A stale file is replaced atomically; claimers of one stale file are serialised.
- At exit the name is removed only while it still holds the file this process claimed.

Keep the file on a local filesystem: its calls are not bounded in time, unlike those on the
shared decision directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import secrets
import stat

from .._decision.files import NotRegularError, open_regular
from .._errors import ConfigurationError
from .pidfolder import open_folder

__all__ = ["PidFile"]

log = logging.getLogger(__name__)

#: What a pid file holds: a positive decimal pid without leading zeros, and a newline.
PID_LINE = re.compile(rb"[1-9][0-9]{0,9}\n")
#: Claims of a file that was replaced between the look at it and its take-over.
_ATTEMPTS = 3
#: The mode bits that let an account other than the owner open the file, and so lock it.
_OPENED_BY_OTHERS = 0o066


class PidFile:
    """This process's pid in ``path``, locked, from :meth:`claim` until :meth:`release`.

    A sender (``examples/publish-drained-now.sh``, as root or the producer's account)
    opens the file and signals only while its own ``flock(LOCK_SH | LOCK_NB)`` fails; it
    reads the pid from the file it opened. Claimers of one stale file are serialised by a
    POSIX record lock, which no sender looks at, so a stale file never looks alive.
    """

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._name = os.path.basename(self.path)
        self._folder: int | None = None  # the file's folder, open from claim to release
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None

    def claim(self) -> None:
        """Publish this process's pid at :attr:`path`, locked; see the module doc.

        Raises:
            ConfigurationError: the folder or an existing file is refused, a running
                producer holds the file, or it cannot be written (the message names the
                file and the fix).
        """
        self._folder = open_folder(self.path)
        try:
            self._claim()
        except BaseException:
            os.close(self._folder)
            self._folder = None
            raise

    def _claim(self) -> None:
        """:meth:`claim` in the folder just opened."""
        try:
            fd, temporary = _locked_pid_file(self._name, self._folder)
        except OSError as error:
            raise self._refused(
                f"cannot be written ({error.strerror or error}): give a path in a local "
                "folder this account can write"
            ) from None
        try:
            self._publish(temporary)
            st = os.fstat(fd)
        except OSError as error:
            os.close(fd)
            raise self._refused(f"cannot be written ({error.strerror or error})") from None
        except BaseException:
            os.close(fd)
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=self._folder)  # linked, or left; renamed: gone
        self._fd, self._identity = fd, (st.st_dev, st.st_ino)

    def problem(self) -> str | None:
        """Why :attr:`path` no longer finds this producer (the file was removed or
        replaced since :meth:`claim`); ``None`` while it does, or when nothing was claimed."""
        if self._identity is None:
            return None
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            what = "was removed"
        except OSError as error:
            what = f"cannot be examined ({error.strerror})"
        else:
            if (st.st_dev, st.st_ino) == self._identity:
                return None
            what = "now holds another file"
        return (
            f"--pid-file {self.path} {what}: a wake-up through it (SIGUSR1, a Slurm trigger) "
            "no longer reaches this producer; restart the producer, and keep the file's "
            "folder writable by its account only"
        )

    def release(self) -> None:
        """Remove the file if its name, in the folder :meth:`claim` opened, still holds
        the file it made, and drop the lock; never reads the file, never raises for a
        name that is gone."""
        if self._fd is None or self._folder is None:
            return
        try:
            if self._stat_name() == self._identity:
                os.unlink(self._name, dir_fd=self._folder)
        except OSError:
            pass
        finally:
            os.close(self._fd)
            os.close(self._folder)
            self._fd = self._identity = self._folder = None

    def _stat_name(self) -> tuple[int, int]:
        """The identity of what the name holds in the folder (a symlink not followed)."""
        st = os.stat(self._name, dir_fd=self._folder, follow_symlinks=False)
        return st.st_dev, st.st_ino

    def _refused(self, problem: str) -> ConfigurationError:
        return ConfigurationError(f"--pid-file {self.path} {problem}", setting="--pid-file")

    def _foreign(self, uid: int) -> ConfigurationError:
        return self._refused(
            f"belongs to another account (uid {uid}): remove it (as its owner or root), or "
            "give another --pid-file"
        )

    def _publish(self, temporary: str) -> None:
        """Give ``temporary`` the name :attr:`path`: a new name, or a stale file's."""
        for _attempt in range(_ATTEMPTS):
            try:
                os.link(temporary, self._name, src_dir_fd=self._folder, dst_dir_fd=self._folder)
                return
            except FileExistsError:
                if self._take_over(temporary):
                    return
        raise self._refused(
            f"was replaced at each of {_ATTEMPTS} attempts to take it over: another producer "
            "is starting with it; give each producer its own --pid-file"
        )

    def _take_over(self, temporary: str) -> bool:
        """Replace the existing file by ``temporary`` if it is a stale pid file of this
        account; ``False`` when the name changed meanwhile (look again).

        Raises:
            ConfigurationError: the existing file is refused (see the module doc).
        """
        try:
            fd, st = open_regular(self._name, os.O_RDWR, dir_fd=self._folder)
        except FileNotFoundError:
            return False
        except NotRegularError as error:
            raise self._refused(
                f"is a {error.kind}, not a pid file: remove it, or give another --pid-file"
            ) from None
        except OSError as error:
            owner = self._owner()
            if owner is not None and owner != os.geteuid():
                raise self._foreign(owner) from None
            raise self._refused(f"cannot be opened ({error.strerror})") from None
        try:
            if st.st_uid != os.geteuid():
                raise self._foreign(st.st_uid)
            content = os.pread(fd, 32, 0)
            if not PID_LINE.fullmatch(content):
                raise self._refused(
                    "exists and holds no pid: it is not a pid file; give another path, or "
                    "remove it if it is left over"
                )
            squatted = _locked(fd)
            if squatted:
                self._check_holder(int(content), st)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lockers = _record_lockers(st) if st.st_mode & _OPENED_BY_OTHERS else None
                if lockers is None or any(_runs_publish_drained(p, st.st_uid) for p in lockers):
                    raise self._refused(
                        "is being taken over by another producer that starts now; give each "
                        "producer its own --pid-file"
                    ) from None
                squatted = True
            if self._stat_name() != (st.st_dev, st.st_ino):
                return False
            if squatted:
                log.warning(
                    "--pid-file %s (mode %04o) is locked by a process that is not its "
                    "producer: replaced by a file only this account can open",
                    self.path,
                    stat.S_IMODE(st.st_mode),
                )
            os.rename(temporary, self._name, src_dir_fd=self._folder, dst_dir_fd=self._folder)
            return True
        finally:
            os.close(fd)  # drops the record lock

    def _check_holder(self, pid: int, st: os.stat_result) -> None:
        """Refuse the locked file of stat ``st``, which names ``pid``, unless its lock
        vouches for nothing: others can open it, and ``pid`` runs no ``publish-drained``
        of this account."""
        if _runs_publish_drained(pid, st.st_uid):
            raise self._refused(
                f"is held by a running producer (pid {pid}): stop it first, or give another "
                "--pid-file"
            )
        if not st.st_mode & _OPENED_BY_OTHERS:
            raise self._refused(
                f"is locked, but its pid {pid} is no publish-drained of this account here "
                "(a producer in another pid namespace?): stop the process that holds it "
                f"(fuser {self.path}), or remove the file"
            )

    def _owner(self) -> int | None:
        """The uid that owns what the name holds (a symlink not followed); ``None``: unknown."""
        try:
            return os.stat(self._name, dir_fd=self._folder, follow_symlinks=False).st_uid
        except OSError:
            return None


def _locked_pid_file(name: str, folder: int | None) -> tuple[int, str]:
    """A new file beside ``name`` in the folder open on ``folder``, holding this
    process's pid, mode 0600 (whatever the umask), exclusively ``flock``-ed: its
    descriptor and name."""
    for _attempt in range(_ATTEMPTS):
        temporary = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temporary, flags, 0o600, dir_fd=folder)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name beside it", name)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, f"{os.getpid()}\n".encode())
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        os.unlink(temporary, dir_fd=folder)
        raise
    return fd, temporary


def _locked(fd: int) -> bool:
    """Whether a process holds an exclusive ``flock`` on ``fd``'s file: the test a sender
    makes, shared, so that it never makes the file look locked to another."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _runs_publish_drained(pid: int, uid: int) -> bool:
    """Whether process ``pid`` runs ``publish-drained`` as ``uid``, as a sender tests it."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            argv = stream.read().split(b"\0")
        return b"publish-drained" in argv and os.stat(f"/proc/{pid}").st_uid == uid
    except OSError:
        return False


def _record_lockers(st: os.stat_result) -> list[int] | None:
    """The pids that ``/proc/locks`` shows holding a POSIX or OFD record lock (``-1``) on
    the file of stat ``st``; ``None``: it cannot tell."""
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as stream:
            rows = [line.split() for line in stream]
    except OSError:
        return None
    kinds = (["POSIX"], ["OFDLCK"])  # a waiter's row has "->" there instead
    return [int(row[4]) for row in rows if row[1:2] in kinds and row[5:6] == [key]]
