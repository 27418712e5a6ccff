"""A FUSE filesystem whose every lookup below the root hangs: a stand-in for a hung
Lustre or NFS client.

``getattr`` answers for ``/`` (so ``os.stat(mountpoint)`` and ``os.path.ismount`` work)
and sleeps for an hour for any other path, so ``os.stat(<mountpoint>/anything)`` blocks
in the kernel, whatever signal it gets, until the connection is aborted through
``/sys/fs/fuse/connections/<id>/abort``.

With ``--listing N`` the root also lists ``segment_health_check.42.1`` …
``segment_health_check.42.N``, whose ``getattr`` hangs: a directory that lists but whose
files do not answer (a Lustre client with a hung OST).

Usage: ``python hungfs.py MOUNTPOINT [--listing N]`` (stays in the foreground until
stopped).
"""

from __future__ import annotations

import errno
import stat
import sys
import time

import mfusepy

HANG_SECONDS = 3600


class HungFilesystem(mfusepy.Operations):
    """The root directory answers (and lists ``names``); everything below it never does."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    use_ns = True  # the modern timestamp convention (silences mfusepy's deprecation warning)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
        time.sleep(HANG_SECONDS)
        raise mfusepy.FuseOSError(errno.EIO)

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *self.names]


def main() -> None:
    mountpoint, *listing = sys.argv[1:]
    count = int(listing[1]) if listing[:1] == ["--listing"] else 0
    names = [f"segment_health_check.42.{task}" for task in range(1, count + 1)]
    mfusepy.FUSE(HungFilesystem(names), mountpoint, foreground=True, nothreads=False)


if __name__ == "__main__":
    main()
