"""Sphinx configuration of the documentation site (``./dev docs`` builds it).

The site's source is the repository root, not ``docs/`` alone: the front page
(README.md), ARCHITECTURE.md, BENCHMARKS.md and CHANGELOG.md are pages of the site as
they are, so a relative link between any two of them, or into ``docs/``, is the same link
on a forge and on the site, and Sphinx checks it. Only the files in ``include_patterns``
are read.

The pages are Markdown (MyST), readable as plain files. ``./dev docs`` builds strictly
(``-W --keep-going -n``): a warning, a broken link or anchor, or a page missing from a
table of contents fails it. ``docs/_static`` and ``docs/_extra`` are relative to this
file: the style sheet, and the site root's ``index.html``.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform

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

# furo: a column that reflows with the window, and an "on this page" table of contents.
# docs/_static/fit.css wraps a code block's long lines and a table's long tokens inside
# the column, so no command or table column hides behind a scroll bar
# (``./dev docs --check-width`` measures that at 1280 px).
html_theme = "furo"
html_title = f"nvrx-seghealth {release}"
html_show_sourcelink = False
html_static_path = ["_static"]
html_css_files = ["fit.css"]
# The site's root page (build/docs/index.html) sends the reader on to docs/index.html.
html_extra_path = ["_extra"]


# A long code token in a table cell (a key, a path, a logfmt field) may break after
# ``_``, ``/``, ``.``, ``=`` or ``,``: a <wbr> there, which a copy leaves out. Its column
# then shrinks to fit the page, and the token never breaks inside a word.
_BREAK_AFTER = re.compile(r"(?<=[_/.=,])(?=\w)")


class _BreakableTableCode(SphinxPostTransform):
    default_priority = 900
    formats = ("html",)

    def run(self, **kwargs: Any) -> None:
        for table in self.document.findall(nodes.table):
            for literal in list(table.findall(nodes.literal)):
                text = literal.astext()
                parts = _BREAK_AFTER.split(text)
                if len(parts) == 1:
                    continue
                literal.children = []
                for index, part in enumerate(parts):
                    if index:
                        literal += nodes.raw("", "<wbr>", format="html")
                    literal += nodes.Text(part)


def setup(app: Sphinx) -> None:
    app.add_post_transform(_BreakableTableCode)
