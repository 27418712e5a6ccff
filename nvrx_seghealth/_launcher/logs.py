"""Make the package's log lines visible in a launcher that configured no logging.

torchrun configures only torch's own loggers (WARNING and up), so without help the
install line (INFO) would be lost. :func:`ensure_visible` gives the ``nvrx_seghealth``
logger a stderr handler at INFO, unless the application already decided where logs go
(a handler on the root logger or on this package's logger).

Standard library only.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["ensure_visible"]

_FORMAT = "[%(levelname).1s %(asctime)s %(process)d] %(name)s: %(message)s"
#: The package logger, parent of every module's: ``nvrx_seghealth``.
_PACKAGE_LOGGER = __name__.partition(".")[0]


def ensure_visible() -> None:
    """Attach a stderr handler to the package logger unless logging is configured.

    The handler is ``nvrx_seghealth``'s, which then no longer propagates: an
    application that later configures the root logger does not get each line twice.
    """
    logger = logging.getLogger(_PACKAGE_LOGGER)
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    logger.propagate = False
