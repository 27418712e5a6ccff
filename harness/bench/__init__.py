"""The benchmark's tools: how ``bench/`` measures (:mod:`.measure`) and its command line
(:mod:`.benchcli`).

Rules: standard library only; the benchmarks (``bench/``) and their checks
(``tests/test_measure.py``, ``tests/test_docs.py``) use them. The rows themselves live in
``bench/``, not here.
"""
