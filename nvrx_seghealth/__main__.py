"""``python -m nvrx_seghealth``: the same as the ``nvrx-seghealth`` command."""

from ._commands import main

raise SystemExit(main())
