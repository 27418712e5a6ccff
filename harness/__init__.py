"""Test and benchmark harness: what only tests/, integration/ and bench/ use.

Not part of the wheel; it builds on the demo's simulated job array
(:mod:`nvrx_seghealth._demo`).
"""
