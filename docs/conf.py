"""Sphinx configuration of the documentation site (``./dev docs`` builds it).

The site's source is the repository root, not ``docs/`` alone: the front page
(README.md), ARCHITECTURE.md, BENCHMARKS.md and CHANGELOG.md are pages of the site as
they are, so a relative link between any two of them, or into ``docs/``, is the same link
on a forge and on the site, and Sphinx checks it. Only the files in ``include_patterns``
are read.

The pages are Markdown (MyST), readable as plain files. ``./dev docs`` builds strictly
(``-W --keep-going -n``): a warning, a broken link or anchor, or a page missing from a
table of contents fails it.
"""

from __future__ import annotations

import importlib.metadata

project = "nvrx-seghealth"
release = version = importlib.metadata.version("nvrx-seghealth")  # pyproject.toml's

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]

root_doc = "docs/index"
include_patterns = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "CHANGELOG.md", "docs/**"]
source_suffix = {".md": "markdown"}

# Headings get the anchors a forge gives them (``#the-hand-off``), to depth 4.
myst_heading_anchors = 4

# The public API as the package exports it: ``nvrx_seghealth.ConfigurationError``, in the
# order of docs/reference/python-api.md, with the signatures' types in the text.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
add_module_names = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# The docstrings are written for the source's readers too: they name internal modules
# (``._settings.durations``), torch's types and the standard library's. The site renders
# the public API only and has no inventory of torch or Python (intersphinx needs the
# network), so a Python reference to anything but a public name of the package is shown
# as text. A broken reference to a public name, a page or an anchor still fails the build.
nitpick_ignore_regex = [(r"py:.*", r"(?!nvrx_seghealth\.[A-Za-z]).*|nvrx_seghealth\._.*")]

html_theme = "alabaster"
html_title = f"nvrx-seghealth {release}"
html_show_sourcelink = False
