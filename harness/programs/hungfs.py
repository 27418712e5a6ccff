"""A FUSE filesystem whose every lookup below the root hangs, or answers late: a stand-in
for a hung, or a slow, Lustre or NFS client.

``getattr`` answers for ``/`` (so ``os.stat(mountpoint)`` and ``os.path.ismount`` work)
and sleeps for an hour for any other path, so ``os.stat(<mountpoint>/anything)`` blocks
in the kernel, whatever signal it gets, until the connection is aborted through
``/sys/fs/fuse/connections/<id>/abort``.

With ``--listing N`` the root also lists ``segment_health_check.42.1`` …
``segment_health_check.42.N``, whose ``getattr`` hangs: a directory that lists but whose
files do not answer (a Lustre client with a hung OST).

With ``--delay SECONDS BACKING SWITCH``, ``getattr`` of a path below the root reads the path's
state in the folder ``BACKING`` when the request arrives, and answers with it ``SECONDS``
later (a slow filesystem, whose answer is as old as the request). The kernel keeps no
answer (entry and attribute timeouts 0), so each ``stat`` of a file is asked anew: one
request for a missing file, two (lookup, getattr) for a present one. While the file
``SWITCH`` exists, a request that arrives hangs instead (a slow filesystem that stops
answering).

Usage: ``python hungfs.py MOUNTPOINT [--listing N | --delay SECONDS BACKING SWITCH]`` (stays in
the foreground until stopped).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time

import mfusepy

HANG_SECONDS = 3600
#: The fields of ``os.stat_result`` a ``getattr`` answer carries.
FIELDS = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size")


class HungFilesystem(mfusepy.Operations):
    """The root directory answers (and lists ``names``); everything below it never does,
    or, with a ``backing`` folder, answers ``delay`` seconds after it was asked."""

    def __init__(
        self, names: list[str], delay: float = 0.0, backing: str | None = None, switch: str = ""
    ) -> None:
        self.names = names
        self.delay = delay
        self.backing = backing
        self.switch = switch

    use_ns = True  # the modern timestamp convention (silences mfusepy's deprecation warning)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
        if self.backing is None or os.path.exists(self.switch):
            time.sleep(HANG_SECONDS)
            raise mfusepy.FuseOSError(errno.EIO)
        try:
            found = os.lstat(os.path.join(self.backing, path.lstrip("/")))
        except OSError as error:
            time.sleep(self.delay)
            raise mfusepy.FuseOSError(error.errno or errno.EIO) from None
        time.sleep(self.delay)
        answer = {name: getattr(found, name) for name in FIELDS}
        answer.update(st_atime=found.st_atime_ns, st_mtime=found.st_mtime_ns)
        return answer | {"st_ctime": found.st_ctime_ns}

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *self.names]


def main() -> None:
    mountpoint, *options = sys.argv[1:]
    count = int(options[1]) if options[:1] == ["--listing"] else 0
    names = [f"segment_health_check.42.{task}" for task in range(1, count + 1)]
    if options[:1] == ["--delay"]:
        filesystem = HungFilesystem(names, float(options[1]), options[2], options[3])
        timeouts = {"entry_timeout": 0, "attr_timeout": 0, "negative_timeout": 0}
    else:
        filesystem, timeouts = HungFilesystem(names), {}
    mfusepy.FUSE(filesystem, mountpoint, foreground=True, nothreads=False, **timeouts)


if __name__ == "__main__":
    main()
