"""``publish-drained --pid-file``: where a trigger finds the producer to wake with SIGUSR1.

It also says how a sender can tell that the pid is the producer's.

docs/operators.md, "A pass now", tells the story. The rules (:class:`PidFile`):

- The lock vouches for the pid. The producer holds an exclusive ``flock`` on the file from
  :meth:`PidFile.claim` until it ends, however it ends.
- The file is 0600: no account but root and the producer's can open it, so none can lock it.
- The file appears complete and locked, or not at all, and its content never changes.
- A file whose lock is free is stale, whatever process its pid names now. So is a locked
  file others can open (an earlier release's 0644) whose pid runs no ``publish-drained``.
- The path is walked folder by folder; only root's or this account's symlinks are followed.
- Each folder on the way may be changed only by root or this account (others: with the
  sticky bit above the file's folder); a root-run trigger trusts what is there.
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
from collections import deque

from .._decision.files import NotRegularError, open_regular
from .._decision.problems import directory_writers
from .._errors import ConfigurationError

__all__ = ["PidFile"]

log = logging.getLogger(__name__)

#: What a pid file holds: a positive decimal pid without leading zeros, and a newline.
PID_LINE = re.compile(rb"[1-9][0-9]{0,9}\n")
#: Claims of a file that was replaced between the look at it and its take-over.
_ATTEMPTS = 3
#: The mode bits that let an account other than the owner open the file, and so lock it.
_OPENED_BY_OTHERS = 0o066
#: Symbolic links followed at most on the way to the folder (the kernel's own limit).
_LINKS = 40
#: A folder on the way is opened as a path only: searching it needs no right to read it.
_FOLDER_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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
        self._folder = self._open_folder()
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

    def _open_folder(self) -> int:
        """Open the file's folder by a walk from ``/``, one ``openat(O_NOFOLLOW)`` per
        name; a symlink is followed only when root or this account owns it. Every folder
        whose entries the walk uses is checked (:meth:`_check_above`), the last one
        strictly (:meth:`_check_folder`); every later call on the file is made in it.

        Raises:
            ConfigurationError: a folder is missing, a symlink of another account, or
                refused.
        """
        names = deque(os.path.dirname(self.path).split("/"))
        fd, where, links = os.open("/", _FOLDER_FLAGS), "/", 0
        try:
            while names:
                name = names.popleft()
                if name in ("", "."):
                    continue
                if name != "..":  # its entries could be changed: a parent's cannot
                    self._check_above(where, os.fstat(fd))
                try:
                    child = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
                except OSError as error:
                    target = self._link(fd, os.path.join(where, name), name, error)
                    links += 1
                    if links > _LINKS:
                        raise self._unusable(os.strerror(errno.ELOOP)) from None
                    names.extendleft(reversed(target.split("/")))
                    if target.startswith("/"):
                        os.close(fd)
                        fd, where = os.open("/", _FOLDER_FLAGS), "/"
                    continue
                os.close(fd)
                fd, where = child, os.path.normpath(os.path.join(where, name))
            self._check_folder(where, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _link(self, fd: int, path: str, name: str, error: OSError) -> str:
        """The target of ``name``, in the folder open on ``fd``, that could not be opened
        as a folder (``error``): a symlink of root or this account.

        Raises:
            ConfigurationError: it is missing, not a folder, or another account's symlink.
        """
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                raise error
            if st.st_uid not in (os.geteuid(), 0):
                raise self._refused(
                    f"is reached through {path}, a symbolic link of uid {st.st_uid}: "
                    "whoever owns the link chooses the folder; give the real folder's path"
                )
            return os.readlink(name, dir_fd=fd)
        except OSError as failed:
            raise self._unusable(failed.strerror or str(failed)) from None

    def _unusable(self, why: str) -> ConfigurationError:
        folder = os.path.dirname(self.path)
        return self._refused(
            f"cannot be written: its folder {folder} cannot be used ({why}); "
            f"create it, writable by this account only (install -d -m 0755 {folder})"
        )

    def _check_above(self, where: str, st: os.stat_result) -> None:
        """Refuse a folder on the way, ``where`` (of stat ``st``), whose entries another
        account can replace (:func:`~.._decision.problems.directory_writers`: its owner,
        or its group or everyone without the sticky bit)."""
        who = directory_writers(st, (os.geteuid(), 0))
        if who:
            raise self._refused(
                f"is below {where} (mode {stat.S_IMODE(st.st_mode):04o}), which "
                f"{' and '.join(who)} can change: another account could put a folder or "
                "link of its own on the way; use a folder whose parents only root or this "
                "account can write (e.g. /run/nvrx-seghealth)"
            )

    def _check_folder(self, folder: str, st: os.stat_result) -> None:
        """Refuse the file's folder ``folder`` (of stat ``st``) when another account can
        write in it, sticky or not."""
        writers = [
            who for who, bit in (("its group", 0o020), ("everyone", 0o002)) if st.st_mode & bit
        ]
        if st.st_uid not in (os.geteuid(), 0):
            writers.insert(0, f"its owner (uid {st.st_uid})")
        if writers:
            who = " and ".join(writers)
            raise self._refused(
                f"is in {folder} (mode {stat.S_IMODE(st.st_mode):04o}), which {who} can "
                "write: another account could plant or replace the file that a Slurm trigger "
                "trusts; use a folder that only this account can write (e.g. "
                "install -d -m 0755 -o ACCOUNT /run/nvrx-seghealth)"
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
            if _locked(fd):
                self._check_holder(int(content), st)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise self._refused(
                    "is being taken over by another producer that starts now; give each "
                    "producer its own --pid-file"
                ) from None
            if self._stat_name() != (st.st_dev, st.st_ino):
                return False
            os.rename(temporary, self._name, src_dir_fd=self._folder, dst_dir_fd=self._folder)
            return True
        finally:
            os.close(fd)  # drops the record lock

    def _check_holder(self, pid: int, st: os.stat_result) -> None:
        """Refuse the locked file of stat ``st``, which names ``pid``, unless its lock
        vouches for nothing: others can open it, and ``pid`` runs no ``publish-drained``
        of this account (then log that it is taken over)."""
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
        log.warning(
            "--pid-file %s (mode %04o) is locked by a process that is not its producer "
            "(pid %d has ended): replaced by a file only this account can open",
            self.path,
            stat.S_IMODE(st.st_mode),
            pid,
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
