"""The project's benchmarks, run by `python manage.py bench chain|scoring|boards`.

They sit outside the domain apps because each drives the whole site through its real parts (the
outbox and submitter on a fresh node, the oracle's scorer, daphne serving the boards) and would
otherwise make the lowest app depend on the ones above it. `common` holds what they share; no
bench imports another.
"""
