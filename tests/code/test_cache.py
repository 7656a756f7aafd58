"""A host's code cache (spec/code.md): fetched once per digest per host, checked against the
digest, fetched again when an entry is corrupted, least recently used out first — real
snapshots read from the org's bucket on the real NATS, two caches on one directory standing
for two daemons of a host."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from natsauth import plane_nats

from lakeshore.code import bucket, pack
from lakeshore.daemon.code_cache import RECENT_S, CodeCache
from lakeshore.errors import SnapshotNotFound

CODE = "/v1/namespaces/default/code"


class Reads:
    """The real bucket read, counted."""

    def __init__(self, js) -> None:
        self.js, self.count = js, 0

    async def __call__(self, digest: str) -> bytes:
        self.count += 1
        return await bucket.read(self.js, "default", digest)


async def _stored(api, tmp_path: Path, name: str, body: str, size: int = 0) -> str:
    root = tmp_path / name
    root.mkdir()
    (root / "tasks.py").write_text(body)
    (root / "pkg").mkdir()
    (root / "pkg" / "data.bin").write_bytes(os.urandom(size))
    snap = pack(root)
    status, answer = await api.request("PUT", f"{CODE}/{snap.digest}", data=snap.data)
    assert status == 201, answer
    return snap.digest


@pytest.fixture
async def reads(nats_server):
    nc = await plane_nats(nats_server.url)
    try:
        yield Reads(nc.jetstream())
    finally:
        await nc.close()


async def test_two_daemons_of_a_host_fetch_a_snapshot_once(api, reads, tmp_path: Path) -> None:
    digest = await _stored(api, tmp_path, "proj", "X = 1\n", size=300_000)
    cache_dir = tmp_path / "cache"
    one, two = CodeCache(cache_dir, reads), CodeCache(cache_dir, reads)
    dirs = await asyncio.gather(*(c.directory(digest) for c in (one, two, one, two)))
    assert len(set(dirs)) == 1 and (dirs[0] / "tasks.py").read_text() == "X = 1\n"
    assert reads.count == 1 and one.fetched + two.fetched == 1
    assert (dirs[0] / "pkg" / "data.bin").stat().st_size == 300_000
    # A later daemon finds it there too (checked against its digest, not fetched).
    three = CodeCache(cache_dir, reads)
    assert await three.directory(digest) == dirs[0] and reads.count == 1


async def test_a_corrupted_entry_is_caught_by_its_digest_and_fetched_again(
    api, reads, tmp_path: Path
) -> None:
    digest = await _stored(api, tmp_path, "proj", "X = 1\n")
    cache_dir = tmp_path / "cache"
    entry = await CodeCache(cache_dir, reads).directory(digest)
    (entry / "tasks.py").write_text("X = 666\n")  # what a broken disk or a hand could do
    (entry / "out.txt").write_text("a run's own output beside the snapshot")
    again = CodeCache(cache_dir, reads)
    assert await again.directory(digest) == entry
    assert (entry / "tasks.py").read_text() == "X = 1\n" and reads.count == 2
    # A file a run wrote beside the snapshot's own is no corruption.
    (entry / "out.txt").write_text("written by a run")
    assert await CodeCache(cache_dir, reads).directory(digest) == entry and reads.count == 2


async def test_a_snapshot_not_in_the_bucket_is_an_error_and_caches_nothing(
    reads, tmp_path: Path, api
) -> None:
    await _stored(api, tmp_path, "proj", "X = 1\n")  # the bucket exists
    missing = "sha256:" + "0" * 64
    with pytest.raises(SnapshotNotFound, match="is not stored in org default"):
        await CodeCache(tmp_path / "cache", reads).directory(missing)
    assert not (tmp_path / "cache" / ("0" * 64)).exists()


async def test_the_least_recently_used_snapshots_leave_a_full_cache(
    api, reads, tmp_path: Path
) -> None:
    digests = [await _stored(api, tmp_path, f"p{i}", f"X = {i}\n", size=100_000) for i in range(3)]
    cache_dir = tmp_path / "cache"
    cache = CodeCache(cache_dir, reads, max_bytes=250_000)
    first = await cache.directory(digests[0])
    second = await cache.directory(digests[1])
    # Both used long enough ago to be evicted, the first one longest ago.
    old = time.time() - RECENT_S - 60
    os.utime(cache_dir / f"{first.name}.used", (old - 60, old - 60))
    os.utime(cache_dir / f"{second.name}.used", (old, old))
    third = await cache.directory(digests[2])
    assert not first.exists() and second.is_dir() and third.is_dir()
