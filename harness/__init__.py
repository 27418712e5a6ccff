"""Test and benchmark harness: everything ``tests/``, ``integration/`` and ``bench/`` share.

Those three import this package and ``nvrx_seghealth`` only, never each other, and this
package imports none of them (import-linter contracts in ``pyproject.toml``). Not part of
the wheel; its simulated jobs build on the demo's job array (:mod:`nvrx_seghealth._demo`).
"""
