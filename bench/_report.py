"""The rows of spec/bench.md's Targets table, and printing them (plain or Markdown)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

HEADER = ("figure", "Lakeshore", "baseline", "ratio", "target", "met?")
_NUMBERS = {1, 2, 3}


@dataclass(frozen=True)
class Row:
    """One figure against its target: a ratio to the baseline, or an absolute bound."""

    figure: str
    ours: float
    baseline: float | None
    target: str
    met: bool
    #: format of ``ours`` and ``baseline``
    fmt: str = "{:,.0f}"
    #: the target's number: the least ratio to the baseline, else the most ``ours``
    limit: float = 0.0

    @classmethod
    def ratio(cls, figure: str, ours: float, baseline: float, at_least: float) -> Row:
        """A rate that must reach ``at_least`` × the baseline's."""
        met = ours >= at_least * baseline
        return cls(figure, ours, baseline, f">= {at_least:g} x", met, limit=at_least)

    @classmethod
    def bound(
        cls, figure: str, ours: float, baseline: float | None, at_most: float, unit: str, fmt: str
    ) -> Row:
        """A time that must stay within ``at_most``."""
        return cls(figure, ours, baseline, f"<= {at_most:g} {unit}", ours <= at_most, fmt, at_most)

    @property
    def is_ratio(self) -> bool:
        return self.target.endswith(" x")

    @property
    def figure_value(self) -> float:
        """What the target judges: the ratio to the baseline, else ``ours``."""
        return self.ours / self.baseline if self.is_ratio and self.baseline else self.ours

    def meets(self, value: float) -> bool:
        """Whether ``value`` (a :attr:`figure_value`) meets this row's target."""
        return value >= self.limit if self.is_ratio else value <= self.limit

    def cells(self) -> tuple[str, ...]:
        base = "-" if self.baseline is None else self.fmt.format(self.baseline)
        ratio = "-" if not self.baseline else f"{self.ours / self.baseline:.2f} x"
        met = "yes" if self.met else "NO"
        return (self.figure, self.fmt.format(self.ours), base, ratio, self.target, met)


def table(rows: Sequence[Row], markdown: bool = False) -> str:
    """The rows under :data:`HEADER`, as aligned text or as a Markdown table."""
    lines = [HEADER, *(r.cells() for r in rows)]
    if markdown:
        out = ["| " + " | ".join(cells) + " |" for cells in lines]
        out.insert(
            1,
            "| "
            + " | ".join("---:" if i in _NUMBERS else "---" for i in range(len(HEADER)))
            + " |",
        )
        return "\n".join(out)
    widths = [max(len(cells[i]) for cells in lines) for i in range(len(HEADER))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in _NUMBERS else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out = [line(lines[0]), "  ".join("-" * w for w in widths)]
    return "\n".join(out + [line(cells) for cells in lines[1:]])


def percentile_ms(samples_s: Sequence[float], q: int) -> float:
    """The ``q``-th percentile (1–99) of samples in seconds, in milliseconds."""
    return statistics.quantiles(samples_s, n=100)[q - 1] * 1000


def run_script(doc: str, n: int, concurrency: int, measure: Callable[..., Awaitable[Any]]) -> None:
    """A workload script's ``main``: ``--n`` and ``--concurrency``, then its table and the
    absolute figures behind it (``measure(n, concurrency)`` answers them)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--n", type=int, default=n)
    p.add_argument("--concurrency", type=int, default=concurrency)
    args = p.parse_args()
    figures = asyncio.run(measure(args.n, args.concurrency))
    print(table(figures.rows()))
    print("\n".join(figures.details()))
