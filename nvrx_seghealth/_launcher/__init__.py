"""What runs inside every torchrun launcher: the registered backend, the handler, one
coordinator per launcher role, the hand-off, the markers, the events and the check.

The only layer below the commands that imports torch; what it may import is checked by
``lint-imports`` in ``./dev lint`` (ARCHITECTURE.md, "Code map").
"""
