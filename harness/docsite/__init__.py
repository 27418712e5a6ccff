"""The documentation site's tools: the CLI page rendered from the parsers, the width check.

- :mod:`.clireference` renders ``docs/reference/cli.md``'s option tables from the parsers
  (``python -m harness.docsite.clireference``); its test holds the page to them.
- :mod:`.width` opens every built page in headless Chromium at 1280 px and reports a code
  block or table wider than its column (``./dev docs --check-width``).

They read the built site and the package; nothing of the harness's jobs or services.
"""
