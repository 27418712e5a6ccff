"""Ports on 127.0.0.1: a free one for a server a test starts, and the mark of torch's race
for a port.

- :func:`free_port` is the demo's: a port below the kernel's ephemeral range. The process
  that binds it does so seconds later, and nothing the kernel hands out meanwhile takes it.
- :data:`PORT_TAKEN` is what a worker prints when it lost that race
  (:mod:`harness.jobs.portrace` runs such a job once more).
"""

from __future__ import annotations

from nvrx_seghealth._demo.ports import unclaimed_port as free_port

__all__ = ["PORT_TAKEN", "free_port"]

#: What a worker prints when the port that its agent chose for the workers' store was
#: taken before the worker could listen on it. torch's agent picks a free port and closes
#: it; rank 0's worker binds it after importing torch, seconds later on a busy node, and
#: any socket of the machine may take that port in between (an outgoing connection's
#: local port included). A worker failure, which the agent restarts and counts. Workers
#: bind that port under plain torch with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``; the
#: backend serves their store on a port it holds instead (``_launcher/agentstore.py``).
PORT_TAKEN = "EADDRINUSE"
