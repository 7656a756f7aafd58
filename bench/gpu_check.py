"""Placement on real GPUs (issue 25): what a lent GPU machine should check, ready to run.

The test suite runs on machines without a GPU (a stand-in ``nvidia-smi`` printing captured
output); this script checks the two things only a real GPU can tell:

1. **detection**: a daemon started with no ``--gpus`` reports the GPUs ``nvidia-smi``
   lists (within this shell's ``CUDA_VISIBLE_DEVICES``), with the same UUIDs;
2. **what a run sees**: for each request of 0…N GPUs, the devices CUDA itself shows the run
   (``torch.cuda`` where torch is installed, else the driver API: ``bench/gpu_probe.py``)
   number what it asked, are the host's, and ``0`` for a run that asked for none; and among
   ``--runs`` random requests held ``--hold`` s each, no two runs that overlapped in time
   saw a common device. The runs share warm worker processes, so this also checks that a
   worker in which CUDA initialised runs only runs of its own devices (a worker takes
   other devices only while CUDA's driver library is not loaded in it: docs/resources.md).

    .venv/bin/python bench/gpu_check.py [--runs 40] [--hold 0.5]

It prints one line a check and exits 1 if any failed, 2 if this machine has no GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
from dataclasses import dataclass

from _harness import daemons, server

from lakeshore.model import InvocationSubmit, QueueCreate, Resources, Result
from lakeshore.sdk import Client

QUEUE = "gpu-check"
PROBE = "gpu_probe:seen"
#: the daemon's own query (lakeshore/daemon/inventory.py)
QUERY = ("--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits")


@dataclass
class Checks:
    failed: int = 0

    def check(self, ok: bool, what: str, detail: object = "") -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if not ok and detail else ""))
        self.failed += not ok


def host_gpus() -> list[str]:
    """The UUIDs of the GPUs this shell may use, in ``nvidia-smi``'s index order."""
    try:
        out = subprocess.run(
            ["nvidia-smi", *QUERY],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        sys.exit(f"no GPU here (nvidia-smi: {exc}); run this on a GPU machine")
    rows = [line.split(", ")[:2] for line in out.strip().splitlines()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [uuid for _, uuid in rows]
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    return [u for w in wanted for i, u in rows if w == i or u.startswith(w)]


async def run_all(client: Client, asks: list[int], hold_s: float) -> list[dict]:
    specs = [
        InvocationSubmit(fn=PROBE, kwargs={"hold_s": hold_s}, resources=Resources(gpus=n))
        for n in asks
    ]
    ids = (await client.submit(QUEUE, specs)).ids
    results = []
    for job_id in ids:
        async with asyncio.timeout(600):
            while not isinstance(result := await client.job_result(job_id, wait_s=20), Result):
                pass
        if not result.ok:
            raise RuntimeError(f"run {job_id} failed: {result.error}")
        results.append(result.value)
    return results


async def main(runs: int, hold_s: float) -> int:
    gpus = host_gpus()
    checks = Checks()
    print(f"{len(gpus)} GPUs visible to this shell: {', '.join(gpus)}")
    async with server() as srv, Client(srv.api, srv.token) as client:
        await client.queue_add(QueueCreate(name=QUEUE))
        async with daemons(srv, QUEUE, 1, len(gpus) + 1):
            async with asyncio.timeout(60):
                while not (rows := await client.workers_ls()) or rows[0].resources is None:
                    await asyncio.sleep(0.2)
            detected = [g.uuid for g in rows[0].resources.total.gpus]
            checks.check(detected == gpus, "the daemon detects nvidia-smi's GPUs", detected)

            each = list(range(len(gpus) + 1))
            for n, seen in zip(each, await run_all(client, each, 0.0), strict=True):
                ok = len(seen["uuids"]) == n and set(seen["uuids"]) <= set(gpus)
                ok = ok and (n > 0 or seen["visible"] == "")
                checks.check(ok, f"a run asking {n} GPUs sees {n} via {seen['via']}", seen)
                checks.check(seen["order"] == "PCI_BUS_ID", "CUDA_DEVICE_ORDER=PCI_BUS_ID", seen)

            rng = random.Random(25)
            asks = [rng.randint(0, len(gpus)) for _ in range(runs)]
            seen = await run_all(client, asks, hold_s)
            sizes = all(len(s["uuids"]) == n for s, n in zip(seen, asks, strict=True))
            checks.check(sizes, f"{runs} random requests each see as many GPUs as asked")
            shared = [
                (a["uuids"], b["uuids"])
                for i, a in enumerate(seen)
                for b in seen[i + 1 :]
                if a["start"] < b["end"] and b["start"] < a["end"]
                and set(a["uuids"]) & set(b["uuids"])
            ]  # fmt: skip
            checks.check(not shared, "no two overlapping runs saw a common device", shared[:3])
    print(f"{checks.failed} checks failed" if checks.failed else "all checks passed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--hold", type=float, default=0.5)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.runs, args.hold)))
