"""Test-only: switch off the segment-health wrapper's shutdown protection.

``test_scenario_shutdown_trap.py`` puts this directory on the ``PYTHONPATH`` of the
simulated agents; Python imports ``sitecustomize`` at start-up, before torchrun runs.
The patched ``shutdown()`` always delegates to the inner handler, as a naive wrapper
would: an excluded launcher then closes the rendezvous for every node.
"""

import sys

from nvrx_seghealth._launcher.handler import SegmentHealthRendezvousHandler


def _delegating_shutdown(self: SegmentHealthRendezvousHandler) -> bool:
    return self.inner.shutdown()


SegmentHealthRendezvousHandler.shutdown = _delegating_shutdown  # type: ignore[method-assign]
print("TEST PATCH: segment-health shutdown() delegates to the inner handler", file=sys.stderr)
