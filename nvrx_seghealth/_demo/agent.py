"""A ``torchrun`` agent whose TorchElastic telemetry goes to files.

``python -m nvrx_seghealth._demo.agent <torchrun options>`` is ``torchrun``, after
routing torch's rendezvous events and the ``nvrx_seghealth`` metrics to the files named
by :data:`.telemetry.EVENTS_FILE_ENV` and :data:`.telemetry.METRICS_FILE_ENV` (see
:func:`.telemetry.route_to_files`): what an operator's own launcher does to send them
to a collector.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .telemetry import EVENTS_FILE_ENV, METRICS_FILE_ENV, route_to_files


def main() -> None:
    route_to_files(Path(os.environ[EVENTS_FILE_ENV]), Path(os.environ[METRICS_FILE_ENV]))
    from torch.distributed.run import main as torchrun

    torchrun(sys.argv[1:])


if __name__ == "__main__":
    main()
