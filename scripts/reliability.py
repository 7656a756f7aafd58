#!/usr/bin/env python3
"""Write ``docs/reliability.md``: the fault matrix of ``spec/faults.md`` with the figures the
fault suite recorded (``tests/faults/report.py`` writes one JSON per case).

    .venv/bin/pytest tests/faults && .venv/bin/python scripts/reliability.py

The rows (number, fault, pass criterion) are read from ``../shared/spec/faults.md`` beside
the repository; without it (a checkout on its own) from the copy below. The records are read
from ``$LAKESHORE_FAULT_RESULTS`` or ``.fault-results/``. What the document holds after the
:data:`KEPT` line (a bench's figures, written by hand) is kept. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT.parent / "shared" / "spec" / "faults.md"
OUT = ROOT / "docs" / "reliability.md"
REGENERATE = ".venv/bin/pytest tests/faults && .venv/bin/python scripts/reliability.py"

#: The matrix of spec/faults.md, for a checkout without shared/ beside it.
FALLBACK_ROWS: list[tuple[int, str, str]] = [
    (1, "daemon SIGKILL mid-run, 5 times during a run of N",
     "lost 0; recorded completions = N; redelivery within ack_wait + 2 heartbeats"),
    (2, "daemon cut from NATS (TCP proxy: blackhole, then reset), then healed",
     "lost 0; double-recorded 0; stale results all recorded stale; the daemon pulls again ≤ 10 s "
     "after heal"),
    (3, "daemon SIGSTOP past its lease, then SIGCONT (20 times)",
     "0 completions accepted from a superseded attempt; each shows as `stale`"),
    (4, "nats-server SIGTERM / SIGKILL mid-run, restarted on its store",
     "every acknowledged submit finishes once; daemons resume ≤ 10 s"),
    (5, "3-node cluster (deploy/ configs) loses the stream leader, then 2 of 3 nodes",
     "1 node: submits stall ≤ 10 s, 0 loss; 2 nodes: submits answer 503 within 5 s, none 2xx; "
     "recovery ≤ 15 s after quorum returns"),
    (6, "control plane SIGKILL at each step of submit (fault points set by an env var) and at "
     "random during a 500-submit loop with SDK retries",
     "every 2xx submit runs and is recorded once; every retried submit with its key makes ≤ 1 "
     "invocation; ready again ≤ 5 s"),
    (7, "DuckDB after SIGKILL during writes (50 times); truncated WAL; a second server on the "
     "same data dir",
     "reopens with every committed row; a bad WAL refuses to start with a clear message (never "
     "starts with rows missing); the second server exits non-zero ≤ 2 s saying the store is in "
     "use"),
    (8, "duplicate submits: 50 concurrent with one key; a retry after a restart; a retry after "
     "the stream's dedup window; same key with another body",
     "exactly one invocation and the same id every time; another body → 409"),
    (9, "clock skew: a daemon at ±10 min wall clock; the control plane's wall clock jumps",
     "0 premature redeliveries; times shown are the server's"),
    (10, "slow work: a run of 3 × ack_wait; a blocked function; one slow and one fast daemon",
     "0 redeliveries while progress is sent; a daemon never holds more claims than its free slots"),
    (11, "huge input: body at the limit ± 1 byte, 100 MiB chunked, JSON nested 10⁵ deep, a 5 MiB "
     "result",
     "exact 413 boundary; deep nesting → 4xx; a too-large result is a clear failed run, never a "
     "stuck one"),
    (12, "fuzzed requests: schemathesis over `/v1/openapi.json` (all checks), bounded, in CI",
     "0 5xx; 0 tracebacks; every error body in the spec's shape"),
    (13, "names: `.`, `*`, `>`, space, `/`, `..`, `\\x00`, uppercase, 64+ chars, a trailing `-`, "
     "unicode look-alikes",
     "all refused 4xx (CLI exit 2 before any network call); 0 NATS errors caused by a name"),
    (14, "numbers out of range in every field (`max_depth` 2³¹, 2⁶³, −1; `elasticity.max` 10²⁰; "
     "`limit` `²`)",
     "4xx naming the field and its range; no actor crash"),
    (15, "unknown namespace / other org's token / sibling token on every route, HTTP and NATS",
     "matrix generated from the route table: other org 403, unknown 404, sibling allowed, bad "
     "token 401, 0 side effects"),
    (16, "path traversal and SQL in every parameter",
     "0 2xx; data dir unchanged outside Lakeshore's files; row counts unchanged"),
    (17, "50 concurrent PATCH + 10 DELETE + drain/archive on one queue, 100 rounds",
     "0 5xx; final row = some serial order of the 2xx calls; 0 streams without a row and 0 rows "
     "without a stream"),
    (18, "`rm --force` with 3 members, 50 pending, 3 running",
     "pending end `cancelled` with reason `queue_deleted`; running finish or cancel as "
     "documented; stream gone ≤ 5 s"),
    (19, "an actor that keeps crashing (any bad input that reaches it)",
     "requests to other queues and namespaces keep working; `/v1/healthz` reports `degraded` "
     "(503) naming the actor while it is down; it comes back without a server restart"),
    (20, "10k queues; 1k daemons (simulated over the real protocol)",
     "see spec/bench.md for the scale figures; 0 errors, 0 lost"),
    (21, "poison invocation (kills its daemon every time) among 100 normal ones",
     "poison ends `failed` (dead letter) after exactly max_attempts; 100/100 others succeed"),
    (22, "disk full under the NATS store or the DuckDB file (small tmpfs or an ENOSPC fault "
     "point)",
     "submits fail 503/507 with the reason; nothing half-written; recovers by itself ≤ 10 s after"
     " space returns"),
    (23, "one org floods the plane: 100k pending + 1,500 concurrent result waits (HTTP and NATS)",
     "another org's p99 for its reads and its daemons' heartbeats ≤ 2 × idle; 0 5xx to it; the "
     "flooder gets 429s, not the others"),
    (24, "the only control plane SIGKILLed (NATS running on its own) during W1 and W2",
     "SDK submits and results go on with 0 errors; on its return the history has every run: 0 "
     "lost, 0 double-recorded"),
    (25, "control plane SIGKILLed between a parent's end and its children's release (50 times)",
     "each child runs exactly once; none stays waiting"),
]  # fmt: skip

#: A row with more cases than this shows their names, not each one's description.
MAX_LISTED = 8


@dataclass
class Row:
    number: int
    fault: str
    criterion: str
    cases: list[dict] = field(default_factory=list)


def spec_rows(path: Path = SPEC) -> tuple[list[Row], str]:
    """The matrix rows and where they came from."""
    if path.is_file():
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            cells = _cells(line)
            if len(cells) == 3 and cells[0].isdigit():
                rows.append(Row(int(cells[0]), cells[1], cells[2]))
        if rows:
            return rows, f"`spec/faults.md` ({len(rows)} rows)"
    rows = [Row(n, fault, crit) for n, fault, crit in FALLBACK_ROWS]
    return rows, "the copy of spec/faults.md's matrix in scripts/reliability.py"


def _cells(line: str) -> list[str]:
    """The cells of a markdown table line (``|`` inside backticks is no separator)."""
    line = line.strip()
    if not (line.startswith("|") and line.endswith("|")):
        return []
    cells, cell, code = [], "", False
    for ch in line[1:-1]:
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
    cells.append(cell.strip())
    return cells


def results_dir() -> Path:
    return Path(os.environ.get("LAKESHORE_FAULT_RESULTS") or ROOT / ".fault-results")


def load_records(folder: Path) -> list[dict]:
    records = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            print(f"skipping {path}: {e}", file=sys.stderr)
            continue
        if isinstance(data, dict) and isinstance(data.get("row"), int):
            records.append(data)
    return records


def _md(text: object) -> str:
    """One table cell: no line breaks, pipes escaped."""
    return re.sub(r"\s*\n\s*", " ", str(text)).replace("|", "\\|").strip()


def _sum(cases: list[dict], key: str) -> str:
    return str(sum(int(c.get(key) or 0) for c in cases)) if cases else "–"


def _tried(cases: list[dict]) -> str:
    if not cases:
        return "–"
    if len(cases) <= MAX_LISTED:
        return "<br>".join(f"**{_md(c['case'])}**: {_md(c.get('tried', ''))}" for c in cases)
    names = ", ".join(_md(c["case"]) for c in cases)
    return f"{len(cases)} cases ({names}); e.g. {_md(cases[0].get('tried', ''))}"


def _result(cases: list[dict]) -> str:
    if not cases:
        return "not run"
    failed = [c for c in cases if not c.get("passed")]
    if not failed:
        head = "**pass**"
        notes = [c for c in cases if c.get("note")] if len(cases) <= MAX_LISTED else []
    else:
        head = f"**fail** ({len(failed)} of {len(cases)} cases)"
        notes = failed
    parts = [f"{_md(c['case'])}: {_md(c['note'])}" for c in notes if c.get("note")]
    return head + ("<br>" + "<br>".join(parts) if parts else "")


def render(rows: list[Row], source: str, folder: Path) -> str:
    dates = sorted(c["at"] for r in rows for c in r.cases if c.get("at"))
    run = f"{dates[0]} to {dates[-1]}" if dates else "no run recorded"
    counts = {
        "pass": sum(bool(r.cases) and all(c.get("passed") for c in r.cases) for r in rows),
        "fail": sum(any(not c.get("passed") for c in r.cases) for r in rows),
        "not run": sum(not r.cases for r in rows),
    }
    lines = [
        "# Reliability: the fault matrix and what held",
        "",
        "Generated by `scripts/reliability.py` from the records the fault suite "
        f"(`tests/faults/`) wrote to `{folder.name}/`; the rows are {source}. Regenerate:",
        "",
        "```sh",
        REGENERATE,
        "```",
        "",
        f"Records from {run}. Rows: {counts['pass']} pass, {counts['fail']} fail, "
        f"{counts['not run']} not run. A row passes when every case of it passed; a case "
        "that fails on a known bug is an expected failure (`xfail`, strict) and its note says "
        "why. The counts are summed over a row's cases: invocations lost, completions "
        "recorded twice, stale completions recorded, 5xx answers.",
        "",
        "| # | fault (and pass criterion) | what was tried | lost | double-recorded | stale "
        "| 5xx | result |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.number} | {_md(r.fault)}<br>*pass:* {_md(r.criterion)} | {_tried(r.cases)} "
            f"| {_sum(r.cases, 'lost')} | {_sum(r.cases, 'double_recorded')} "
            f"| {_sum(r.cases, 'stale')} | {_sum(r.cases, 'errors_5xx')} | {_result(r.cases)} |"
        )
    return "\n".join(lines) + "\n"


#: Where the hand-written part of the document begins (a bench's figures): kept as it is.
KEPT = "<!-- not generated: scripts/reliability.py keeps what follows -->"


def _kept(out: Path) -> str:
    """The hand-written part of the document at ``out``, from :data:`KEPT` on (or nothing)."""
    text = out.read_text(encoding="utf-8") if out.is_file() else ""
    at = text.find(KEPT)
    return "" if at < 0 else "\n" + text[at:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC, help="the fault matrix (markdown)")
    parser.add_argument("--results", type=Path, default=None, help="the records' folder")
    parser.add_argument("--out", type=Path, default=OUT, help="the document to write")
    args = parser.parse_args(argv)
    rows, source = spec_rows(args.spec)
    folder = args.results or results_dir()
    by_number = {r.number: r for r in rows}
    unknown = []
    for rec in load_records(folder):
        row = by_number.get(rec["row"])
        (row.cases if row else unknown).append(rec)
    for row in rows:
        row.cases.sort(key=lambda c: str(c.get("case", "")))
    if unknown:
        print(f"records of rows the matrix does not have: {sorted({c['row'] for c in unknown})}",
              file=sys.stderr)  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(rows, source, folder) + _kept(args.out), encoding="utf-8")
    ran = sum(bool(r.cases) for r in rows)
    print(f"wrote {args.out} ({ran} of {len(rows)} rows with records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
