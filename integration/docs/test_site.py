"""The built site fits a 1280 px window, and its root leads to the documentation.

Every page is opened in headless Chromium (:mod:`harness.docsite.width`, as
``./dev docs --check-width`` does): no code block or table may be wider than its column.
Chromium is Debian's ``chromium``: with ``CI=true`` or ``NVRX_SEGHEALTH_CHROMIUM_INSTALL=1``
a missing one is installed (as root), and if it cannot be, the test fails; elsewhere the
test skips, naming the command that checks by hand.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.docs import ROOT
from harness.docsite import width as sitewidth

IN_CI = os.environ.get("CI") == "true"


def _chromium() -> str:
    program = sitewidth.browser()
    if program is None:
        reason = "no Chromium (apt-get install chromium; then ./dev docs --check-width)"
        if IN_CI:
            pytest.fail(f"CI=true requires Chromium: {reason}", pytrace=False)
        pytest.skip(reason)
    return program


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``./dev docs`` builds it, in a folder of this module's own."""
    pytest.importorskip("sphinx", reason="pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "-q", "-c", "docs", "-b", "html", ".", out],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return out


def test_the_root_page_leads_to_the_documentation(site):
    root = (site / "index.html").read_text()
    (target,) = set(re.findall(r'(?:url=|href=")([^"]+\.html)', root))
    assert target == "docs/index.html" and (site / target).is_file()


@pytest.mark.timeout(900)  # about 3 s a page on an idle machine, more beside a suite
def test_every_page_fits_1280_px(site):
    program = _chromium()
    pages = sitewidth.pages(site)
    assert len(pages) >= 20 and site / "docs" / "troubleshooting.html" in pages
    found = [overflow for page in pages for overflow in sitewidth.measure(site, program, page)]
    assert [str(overflow) for overflow in found] == []


def test_a_line_wider_than_the_column_is_found(site, tmp_path):
    """The measurement can fail: a code block whose line cannot wrap is reported."""
    program = _chromium()
    page = site / "docs" / "reference" / "backend.html"
    wide = '<pre style="white-space: pre">' + "x" * 400 + "</pre>"
    planted = page.parent / "planted.html"
    planted.write_text(page.read_text().replace("</article>", wide + "</article>", 1))
    try:
        found = sitewidth.measure(site, program, planted)
    finally:
        planted.unlink()
    assert [(o.page, o.what, o.text) for o in found] == [
        ("docs/reference/planted.html", "pre", "x" * 60)
    ]
    assert found[0].hidden > 1000
