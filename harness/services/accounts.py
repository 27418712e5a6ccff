"""Another account on this machine: root required, user ``nobody``, and the package where
``nobody`` can run it (:func:`public_copy`, :func:`as_nobody`)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys

import pytest
import yaml

import nvrx_seghealth

__all__ = ["NOBODY", "SETPRIV_NOBODY", "as_nobody", "public_copy", "require_root"]

#: The uid of user ``nobody``.
NOBODY = pwd.getpwnam("nobody").pw_uid
#: The command prefix that runs a command as user ``nobody``, group ``nogroup`` (root only).
SETPRIV_NOBODY = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")

_CLI = "import sys; from nvrx_seghealth._commands import main; sys.exit(main())"


def require_root(reason: str) -> None:
    """Skip unless running as root, and fail instead under ``CI=true`` (CI runs as root,
    so a test that needs it must run there): ``reason`` says what root is needed for."""
    if os.geteuid() == 0:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true runs as root: {reason}", pytrace=False)
    pytest.skip(reason)


def public_copy(root: str) -> str:
    """Copy the package and PyYAML under ``root`` where user nobody can read them; return
    the folder to put on ``PYTHONPATH``."""
    lib = os.path.join(root, "lib")
    shutil.copytree(os.path.dirname(nvrx_seghealth.__file__), os.path.join(lib, "nvrx_seghealth"))
    shutil.copytree(os.path.dirname(yaml.__file__), os.path.join(lib, "yaml"))
    return lib


def as_nobody(lib: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``nvrx-seghealth ARGS`` as user nobody, from the copy in ``lib``, with ``env``."""
    command = [os.path.realpath(sys.executable), "-s", "-c", _CLI, *args]
    command = [*SETPRIV_NOBODY, *command]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PYTHONPATH": lib},
        stdin=subprocess.DEVNULL,
        check=False,
    )
