"""What runs inside every torchrun launcher: the registered backend, the handler, one
coordinator per launcher role, the hand-off, the markers, the events and the check.

The only layer that imports torch (see ARCHITECTURE.md).
"""
