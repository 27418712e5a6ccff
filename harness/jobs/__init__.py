"""Whole jobs: real ``torchrun`` agents on this machine, simulated or through real launchers.

- The demo's simulated job array as the scenarios run it (:mod:`.simjob`), the fault
  matrix (:mod:`.faults`), the configuration matrix (:mod:`.configurations`,
  :mod:`.matrixcell`) and SIGTERM to one launcher (:mod:`.sigterm`).
- Jobs of real launchers (:mod:`.launcherjob`), the watch's jobs (:mod:`.watchjob`) and the
  example batch script through real Slurm (:mod:`.slurmjob`).
- A job that torch's port race struck runs once more (:mod:`.portrace`).

Rules: the top room. A job may use the session's plugins and values, the services and
the basics; nothing below imports a job. A new kind of whole job gets a module here.
"""
