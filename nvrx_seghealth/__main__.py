"""``python -m nvrx_seghealth``: the same as the ``nvrx-seghealth`` command."""

from .cli import main

raise SystemExit(main())
