"""``python -m nvrx_seghealth``: the same as the ``nvrx-seghealth`` command."""

from .commands import main

raise SystemExit(main())
