"""How a setting enters the package: validated once, where it enters, into frozen values.

What this folder may import is checked by ``lint-imports`` in ``./dev lint`` (the
``[tool.importlinter]`` contracts in pyproject.toml; ARCHITECTURE.md, "Code map").
"""
