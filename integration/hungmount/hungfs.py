"""A FUSE filesystem whose every lookup below the root hangs: a stand-in for a hung
Lustre or NFS client.

``getattr`` answers for ``/`` (so ``os.stat(mountpoint)`` and ``os.path.ismount`` work)
and sleeps for an hour for any other path, so ``os.stat(<mountpoint>/anything)`` blocks
in the kernel, whatever signal it gets, until the connection is aborted through
``/sys/fs/fuse/connections/<id>/abort``.

Usage: ``python hungfs.py MOUNTPOINT`` (stays in the foreground until stopped).
"""

from __future__ import annotations

import errno
import stat
import sys
import time

import mfusepy

HANG_SECONDS = 3600


class HungFilesystem(mfusepy.Operations):
    """The root directory answers; everything below it never does."""

    use_ns = True  # the modern timestamp convention (silences mfusepy's deprecation warning)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
        time.sleep(HANG_SECONDS)
        raise mfusepy.FuseOSError(errno.EIO)


def main() -> None:
    (mountpoint,) = sys.argv[1:]
    mfusepy.FUSE(HungFilesystem(), mountpoint, foreground=True, nothreads=False)


if __name__ == "__main__":
    main()
