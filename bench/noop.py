"""Functions the benchmark daemons import (``PYTHONPATH`` includes ``bench/``)."""


def noop(i: int = 0) -> int:
    return i
