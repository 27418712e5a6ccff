"""Test and benchmark harness: everything ``tests/``, ``integration/`` and ``bench/`` share.

Those three import this package and ``nvrx_seghealth`` only, never each other, and this
package imports none of them (import-linter contracts in ``pyproject.toml``). Not part of
the wheel; its simulated jobs build on the demo's job array (:mod:`nvrx_seghealth._demo`).

Its rooms, each by what it stands up, from the top down (contract ``harness-rooms``):

- :mod:`.jobs` (whole jobs) and :mod:`.bench` (the benchmark's tools);
- :mod:`.session`: the pytest session's plugins, order, summary and shared values;
- :mod:`.services`: etcd, Slurm, FUSE, accounts and processes a test stands up;
- the basics, at the top of the package: in-process launchers on real stores
  (:mod:`.rendezvous`), the handoff's shared tests (:mod:`.handoff`), telemetry
  (:mod:`.telemetry`), the command line (:mod:`.commands`), the docs' examples
  (:mod:`.docs`); below them ports, waits and a Slurm environment (:mod:`.ports`,
  :mod:`.waits`, :mod:`.slurmenv`) and the programs run by path (:mod:`.programs`).

A room imports only the rooms below it.
"""
