"""The decision contract shared by the consumer, the producer and the operators' commands:
the allocation unit, the decision file and its judgement, atomic locked writes, and the
helper processes that bound every filesystem call.

Standard library only (checked by ``./dev lint``, see ARCHITECTURE.md).
"""
