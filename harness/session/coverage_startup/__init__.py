"""The start-up folder of the Python processes a test starts under ``--cov``.

``conftest.py`` puts :data:`FOLDER` first on their ``PYTHONPATH``; Python then imports its
``sitecustomize`` (:mod:`.sitecustomize`: coverage pauses while torch imports).
"""

from pathlib import Path

__all__ = ["FOLDER"]

#: The folder to put on ``PYTHONPATH``.
FOLDER = Path(__file__).resolve().parent
