"""What runs on a service node: ``publish-drained``'s engine, its Slurm queries, host
lists, debounce, state file and audit events.

What this folder may import is checked by ``lint-imports`` in ``./dev lint`` (the
``[tool.importlinter]`` contracts in pyproject.toml; ARCHITECTURE.md, "Code map").
"""
