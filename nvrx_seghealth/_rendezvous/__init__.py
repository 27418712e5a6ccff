"""The rendezvous backends the check runs on, and what serves every one of them.

* The one table of inner backends (:mod:`.registry`) and their creators (:mod:`.creators`).
* etcd-v3: a rendezvous backend and store for torchrun over etcd's v3 API (:mod:`.etcd_v3`).
* barrier: a rendezvous whose store work per launcher does not grow with the world
  (:mod:`.barrier`).
* etcd-v2: torch's own, made safe through a leader election (:mod:`.etcd_v2`), over a store
  that reads one key (:mod:`.etcd_reads`).
* One retry policy for a replicated service (:mod:`.retry`), and what stops a launcher
  (:mod:`.signals`).

Rules: it knows nothing of the check. It imports torch, the errors and logfmt, never
``_launcher``, ``_decision`` or ``_settings`` (``lint-imports`` in ``./dev lint``). A new
backend is a row of the table and a module here.
"""
