"""The host's cache of code snapshots (spec/code.md): fetched once per digest per host, checked
against the digest, unpacked, and kept within a size bound, least recently used first out.

Layout under the cache directory (shared by every daemon of the host that names it):

- ``<hex>/`` — the snapshot's files, unpacked; a run's working directory and first
  ``sys.path`` entry. It appears whole (unpacked beside it, then renamed into place).
- ``<hex>.files`` — the snapshot's file list (JSON): what
  :func:`~lakeshore.code.snapshot.tree_digest` packs again to check the files against the
  digest. Files a run writes beside them do not count; a changed, truncated or deleted one
  does.
- ``<hex>.lock`` — held (``flock``) while a daemon fetches or replaces the entry, so two
  daemons of a host fetch a digest once: the second finds it there.
- ``<hex>.used`` — touched at each use: the least recently used entries are evicted first.

A daemon checks an entry against its digest the first time it uses it (a file read and a
hash), then trusts it for the rest of its life: a run of a cached snapshot costs a ``stat``
and a touch. An entry that fails the check is fetched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from lakeshore.code import snapshot
from lakeshore.errors import Invalid

log = logging.getLogger(__name__)

#: Default bound of a host's cache (bytes of unpacked files).
DEFAULT_MAX_BYTES = 10 * 1024**3
#: An entry used this recently is never evicted: a run may have it as its directory.
RECENT_S = 600.0

#: Fetches a snapshot's bytes by its digest.
Fetch = Callable[[str], Awaitable[bytes]]


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/lakeshore/code`` (``~/.cache/lakeshore/code``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lakeshore" / "code"


class CodeCache:
    """Args:
    root: the cache directory (created).
    fetch: reads a snapshot from the org's bucket.
    max_bytes: the bound of the unpacked files together.
    """

    def __init__(self, root: Path, fetch: Fetch, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root, self._fetch, self._max_bytes = root, fetch, max_bytes
        #: digests this process checked against their files
        self._checked: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        #: how many snapshots this process fetched (the others were there)
        self.fetched = 0

    async def directory(self, digest: str) -> Path:
        """The directory of ``digest``'s files, fetched first if this host has not got it.

        Raises:
            SnapshotNotFound: the org's bucket does not hold it.
            Unavailable: it could not be read.
            Invalid: what was read does not match the digest, or the cache cannot be
                written (named).
        """
        hexd = digest.removeprefix(snapshot.DIGEST_PREFIX)
        entry = self.root / hexd
        if digest in self._checked and entry.is_dir():
            _touch(self.root / f"{hexd}.used")
            return entry
        async with self._locks.setdefault(digest, asyncio.Lock()):
            if digest not in self._checked or not entry.is_dir():
                await self._ensure(digest, hexd)
                self._checked.add(digest)
        _touch(self.root / f"{hexd}.used")
        return entry

    async def _ensure(self, digest: str, hexd: str) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Invalid(f"code cache {self.root}: {e.strerror}; pass --code-cache DIR") from None
        # Another daemon of the host fetching it holds the lock: this one waits, off the loop.
        fd = await asyncio.to_thread(_lock, self.root / f"{hexd}.lock")
        try:
            if await asyncio.to_thread(self._intact, digest, hexd):
                return
            data = await self._fetch(digest)
            self.fetched += 1
            await asyncio.to_thread(self._install, digest, hexd, data)
        finally:
            os.close(fd)
        await asyncio.to_thread(self._evict, hexd)

    def _intact(self, digest: str, hexd: str) -> bool:
        """Whether the entry is there and its files match the digest (else it is removed)."""
        entry, listed = self.root / hexd, self.root / f"{hexd}.files"
        if not entry.is_dir():
            return False
        try:
            paths = json.loads(listed.read_text())
            if snapshot.tree_digest(entry, paths) == digest:
                return True
        except (OSError, ValueError, TypeError, Invalid):
            pass
        log.warning("code snapshot %s in %s does not match its digest: fetched again",
                    digest, self.root)  # fmt: skip
        _remove(self.root, entry)
        return False

    def _install(self, digest: str, hexd: str, data: bytes) -> None:
        staging = self.root / f"{hexd}.unpacking-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        snapshot.unpack(data, digest, staging)
        (self.root / f"{hexd}.files").write_text(json.dumps(snapshot.names(data)))
        os.rename(staging, self.root / hexd)

    def _evict(self, keep: str) -> None:
        """Remove the least recently used entries until the cache is within its bound."""
        sizes = {p.name: _size(p) for p in self.root.iterdir() if p.is_dir() and "." not in p.name}
        total = sum(sizes.values())
        if total <= self._max_bytes:
            return
        used = []
        for hexd, size in sizes.items():
            if hexd != keep:
                with contextlib.suppress(OSError):
                    used.append(((self.root / f"{hexd}.used").stat().st_mtime, hexd, size))
        now = time.time()
        for mtime, hexd, size in sorted(used):
            if total <= self._max_bytes:
                break
            if now - mtime < RECENT_S:
                continue
            with _flocked(self.root / f"{hexd}.lock"):
                _remove(self.root, self.root / hexd)
            total -= size
            log.info("code cache %s: evicted %s (least recently used)", self.root, hexd)


def _remove(root: Path, entry: Path) -> None:
    """Move ``entry`` aside, then delete it (a run whose directory it is keeps its cwd)."""
    aside = root / f"{entry.name}.removing-{os.getpid()}-{time.monotonic_ns()}"
    with contextlib.suppress(OSError):
        os.rename(entry, aside)
        shutil.rmtree(aside, ignore_errors=True)
    for suffix in (".files", ".used"):
        with contextlib.suppress(OSError):
            (root / f"{entry.name}{suffix}").unlink()


def _size(directory: Path) -> int:
    total = 0
    for top, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(top, name)).st_size
    return total


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.touch()


def _lock(path: Path) -> int:
    """An exclusive lock on ``path`` (created), once no other process holds it: the open
    descriptor, whose closing releases it. Blocks the thread."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _flocked(path: Path) -> Iterator[None]:
    fd = _lock(path)
    try:
        yield
    finally:
        os.close(fd)
