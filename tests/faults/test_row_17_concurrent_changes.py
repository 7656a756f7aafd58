"""Row 17: 50 concurrent PATCHes, 10 DELETEs and drain / archive / unarchive on one queue,
100 rounds: no 5xx; the final row is what some serial order of the 2xx calls gives; no
stream without a row and no row without a stream."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from report import record

Q = "/v1/namespaces/default/queues"
ROUNDS = 100
ON_FULL = ("reject", "drop_oldest", "block")


def _fields(row: dict) -> tuple:
    return (row["description"], row["max_depth"], row["on_full"])


async def _streams(js) -> set[str]:
    prefix = "LS_default_"
    return {
        s.config.name[len(prefix) :]
        for s in await js.streams_info()
        if s.config.name.startswith(prefix)
    }


@pytest.mark.slow
@pytest.mark.timeout(200)
async def test_concurrent_patch_delete_and_transitions_on_one_queue(api, js, register):
    rng = random.Random(17)
    statuses: dict[int, int] = {}
    deleted_rounds = checked_rounds = 0
    began = time.monotonic()
    async with asyncio.timeout(150):
        for r in range(ROUNDS):
            status, row = await api.get(Q + "/race")
            if status == 404:
                status, row = await api.post(Q, {"name": "race", "description": f"init-{r}"})
                assert status == 201, row
            elif row["state"] != "active":
                status, row = await api.post(Q + "/race/unarchive")
                assert status == 200, row
            initial = row
            # Every other round a daemon pulls from the queue, so the DELETEs (no --force)
            # are refused and the final row is checked against the PATCHes.
            member = r % 2 == 0
            if r == 0:
                worker = await register("w", queues=["race"])
            edit = {"add": ["race"]} if member else {"remove": ["race"]}
            status, _ = await api.post(f"/v1/namespaces/default/workers/{worker.id}/queues", edit)
            assert status == 200
            patches = [
                {
                    "description": f"r{r}-p{i}",
                    "max_depth": rng.choice([None, rng.randint(1, 10**6)]),
                    "on_full": rng.choice(ON_FULL),
                }
                for i in range(50)
            ]
            calls = [("PATCH", Q + "/race", p) for p in patches]
            calls += [("DELETE", Q + "/race", None)] * 10
            verbs = ("drain", "archive", "unarchive")
            calls += [("POST", Q + "/race/" + v, None) for v in verbs] * 2
            rng.shuffle(calls)
            # The PATCHes go at once; each DELETE and transition once a random number of
            # PATCHes has been answered (sent all at once, a DELETE, which has no body to
            # read, always lands first and every round would be 60 x 404).
            answered = 0
            progress = asyncio.Condition()

            async def one(
                method: str, url: str, body: object, progress: asyncio.Condition = progress
            ) -> tuple[int, object]:
                nonlocal answered
                if method != "PATCH":
                    after = rng.randint(0, 50)
                    async with progress:
                        await progress.wait_for(lambda after=after: answered >= after)
                result = await api.request(method, url, json=body)
                if method == "PATCH":
                    async with progress:
                        answered += 1
                        progress.notify_all()
                return result

            answers = await asyncio.gather(*(one(*c) for c in calls))
            for (method, _, body), (status, answer) in zip(calls, answers, strict=True):
                statuses[status] = statuses.get(status, 0) + 1
                assert status < 500, (r, method, body, status, answer)
                if method == "PATCH" and status == 200:
                    assert _fields(answer) == _fields(body | {}), (body, answer)
            ok_patches = [
                _fields(body)
                for (m, _, body), (s, _) in zip(calls, answers, strict=True)
                if m == "PATCH" and s == 200
            ]
            ok_states = [
                answer["state"]
                for (m, url, _), (s, answer) in zip(calls, answers, strict=True)
                if m == "POST" and s == 200
            ]
            ok_deletes = sum(
                m == "DELETE" and s == 200 for (m, _, _), (s, _) in zip(calls, answers, strict=True)
            )
            assert ok_deletes <= (0 if member else 1), r
            status, final = await api.get(Q + "/race")
            if ok_deletes:
                deleted_rounds += 1
                assert status == 404, (r, final)
            else:
                assert status == 200, (r, final)
                assert _fields(final) in [_fields(initial), *ok_patches], (r, final)
                assert final["state"] in [initial["state"], *ok_states], (r, final)
                checked_rounds += 1
            listed = (await api.get(Q))[1]["queues"]
            rows = {q["name"] for q in listed if q["namespace"] == "default"}
            streams = await _streams(js)
            assert streams == rows | ({"default"} & streams), (r, rows, streams)
    took = time.monotonic() - began
    assert statuses.get(500, 0) == 0
    record(
        17,
        "concurrent-changes",
        tried=f"{ROUNDS} rounds of 50 PATCH + 10 DELETE + 2x drain/archive/unarchive at once "
        "on one queue (re-created or unarchived between rounds; a member every other round)",
        passed=True,
        errors_5xx=sum(n for s, n in statuses.items() if s >= 500),
        note=f"statuses {dict(sorted(statuses.items()))}; deleted in {deleted_rounds} rounds; "
        f"in the {checked_rounds} others (a member refuses the DELETEs) the final row was one "
        f"2xx PATCH's fields (or the initial) and a 2xx transition's state; streams = rows "
        f"after every round; {took:.0f}s",
    )
