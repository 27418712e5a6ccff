"""The pytest session's own parts: its plugins, its order, its summary, its shared values.

- The fixtures of more than one test folder (:mod:`.fixtures`) and the run's summary
  (:mod:`.summary`): the root ``conftest.py`` registers both (``pytest_plugins``).
- The order of the tests over the xdist workers (:mod:`.schedule`).
- A value computed once per session for every worker (:mod:`.once`).
- Coverage by tier (:mod:`.tiercoverage`), and the start-up of the processes a test
  starts while coverage measures (:mod:`.coverage_startup`).

Rules: what lives once per test session. It uses the services and the basics; the jobs
record into it. It starts no job.
"""
