"""Whether every page of the built site fits a 1280 px window: no code block or table wider
than its column.

Each page is copied beside the built site with a short script at its end, then opened in
headless Chromium (``--dump-dom``) at :data:`WIDTH` x :data:`HEIGHT`. The script measures
every ``pre``, table and table wrapper of the page's main column, once the style sheets
apply, and writes what overflows into the DOM that Chromium prints:

- an element whose content is wider than its box (``scrollWidth > clientWidth``): a
  scroll bar hides part of a line or of a column;
- an element whose right edge passes the column's.

``python -m harness.docsite.width build/docs`` (``./dev docs --check-width``) prints each
overflow and exits 1, or exits 0 with the count of pages measured; exit 2 without
Chromium. Standard library only.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HEIGHT", "WIDTH", "Overflow", "browser", "measure", "pages"]

#: The window the review reads the site in.
WIDTH, HEIGHT = 1280, 900
#: The programs that may be Chromium, in order.
BROWSERS = ("chromium", "chromium-browser", "google-chrome")

_MEASURE = """
<script>
(() => {
  const article = document.querySelector("[role=main]") || document.body;
  const edge = article.getBoundingClientRect().right;
  const found = [];
  for (const el of article.querySelectorAll("pre, table, .table-wrapper")) {
    const box = el.getBoundingClientRect();
    const hidden = el.scrollWidth - el.clientWidth;
    const past = box.right - edge;
    if (hidden > 1 || past > 1) {
      found.push({what: el.tagName.toLowerCase() + (el.className ? "." + el.className : ""),
                  hidden: hidden, past: Math.round(past),
                  text: el.textContent.trim().slice(0, 60)});
    }
  }
  const out = document.createElement("pre");
  out.id = "sitewidth-result";
  out.textContent = JSON.stringify({width: window.innerWidth, found: found});
  document.body.appendChild(out);
})();
</script>
"""
_RESULT = re.compile(r'<pre id="sitewidth-result">(.*?)</pre>', re.DOTALL)


@dataclass(frozen=True)
class Overflow:
    """One element wider than its column: its page, its tag and class, how many pixels
    hide behind its scroll bar and pass the article's edge, the start of its text."""

    page: str
    what: str
    hidden: int
    past: int
    text: str

    def __str__(self) -> str:
        return (
            f"{self.page}: {self.what} hides {self.hidden} px, passes the column by "
            f"{self.past} px: {self.text!r}"
        )


def browser() -> str | None:
    """The Chromium program on ``PATH``, or ``None``."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def pages(site: Path) -> list[Path]:
    """The site's pages: every HTML file but the search, the index and the root redirect."""
    skip = {"search.html", "genindex.html", "py-modindex.html"}
    return sorted(
        p
        for p in site.rglob("*.html")
        if p.name not in skip and "_static" not in p.parts and p != site / "index.html"
    )


def measure(site: Path, program: str, page: Path) -> list[Overflow]:
    """The overflows of one ``page`` of ``site``, measured with Chromium ``program``."""
    relative = page.relative_to(site).as_posix()
    with tempfile.NamedTemporaryFile(
        "w", suffix=".html", prefix=".sitewidth-", dir=page.parent, delete=False
    ) as copy:
        copy.write(page.read_text().replace("</body>", _MEASURE + "</body>"))
    try:
        done = subprocess.run(
            [
                program,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--window-size={WIDTH},{HEIGHT}",
                "--dump-dom",
                Path(copy.name).as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    finally:
        Path(copy.name).unlink()
    result = _RESULT.search(done.stdout)
    if result is None:
        raise RuntimeError(f"{relative}: {program} printed no measurement: {done.stderr[-2000:]}")
    measured = json.loads(result[1].replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    if measured["width"] != WIDTH:
        raise RuntimeError(f"{relative}: the window was {measured['width']} px, not {WIDTH}")
    return [Overflow(relative, **found) for found in measured["found"]]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.docsite.width SITE_DIRECTORY", file=sys.stderr)
        return 2
    program = browser()
    if program is None:
        print(
            "sitewidth: no Chromium on PATH (apt-get install chromium); the width of the "
            "pages was not measured",
            file=sys.stderr,
        )
        return 2
    site = Path(argv[0])
    measured = pages(site)
    found = [overflow for page in measured for overflow in measure(site, program, page)]
    for overflow in found:
        print(overflow)
    print(
        f"sitewidth: {len(measured)} pages at {WIDTH} px, {len(found)} code blocks or tables "
        "wider than their column"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
