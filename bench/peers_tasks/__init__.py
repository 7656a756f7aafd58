"""Task modules of the peers bench (``bench/peers.py``): the same no-op as ``bench/noop.py``
for dramatiq and Celery, each on the private Redis the bench starts.

Each peer module exposes one interface to the bench: ``enqueue(n)`` (the Drain tasks, no
results stored) and ``round_trip(i, timeout_s)`` (one W2 submit → result). Its workers
count their runs through :mod:`peers_tasks.tally`.
"""

__all__: list[str] = []
