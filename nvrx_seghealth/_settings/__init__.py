"""How a setting enters the package: validated once, where it enters, into frozen values.

Standard library plus PyYAML; never torch (checked by ``./dev lint``, see ARCHITECTURE.md).
"""
