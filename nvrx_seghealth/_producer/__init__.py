"""What runs on a service node: ``publish-drained``'s engine, its Slurm queries, host
lists, debounce, state file and audit events, and when ``--interval`` runs its passes
(``schedule.py``: SIGUSR1 runs one now) and its ``--pid-file`` (``pidfile.py``).

What this folder may import is checked by ``lint-imports`` in ``./dev lint`` (the
``[tool.importlinter]`` contracts in pyproject.toml; ARCHITECTURE.md, "Code map").
"""
