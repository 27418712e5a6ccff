"""The decision contract shared by the consumer, the producer and the operators' commands:
the allocation unit, the decision file and its judgement, atomic locked writes, and the
helper processes that bound every filesystem call.

What this folder may import is checked by ``lint-imports`` in ``./dev lint`` (the
``[tool.importlinter]`` contracts in pyproject.toml; ARCHITECTURE.md, "Code map").
"""
