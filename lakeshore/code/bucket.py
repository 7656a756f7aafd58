"""An org's code snapshots in JetStream: one Object Store bucket per org
(:func:`~lakeshore.bus.subjects.code_bucket`), one object per digest.

Written by the control plane only, through nats-py's object store. Read by daemons through
the one JetStream API subject their grant names (:func:`~lakeshore.bus.subjects.code_read_subject`,
a message get on the bucket's stream): the object's meta by its subject, then its chunks
one after the other by ``next_by_subj``. So a daemon can read its org's snapshots and
nothing else: it can neither list, write, nor delete them, nor read another org's.

An object's ``description`` holds what the API shows of it (:class:`CodeInfo` less the
digest, JSON); the bytes are the snapshot's tar, checked against the digest by the reader
(:func:`lakeshore.code.snapshot.verify`).
"""

from __future__ import annotations

import base64
import contextlib
import json
from datetime import datetime

import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api
from nats.js.object_store import ObjectStore

from lakeshore.bus import subjects
from lakeshore.errors import Invalid, SnapshotNotFound
from lakeshore.model import CodeInfo

#: What a call of this module may raise from NATS.
NATS_ERRORS = (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError)
#: Bytes per chunk message: a message get answers it base64-encoded in JSON, well under
#: NATS's default 1 MiB payload.
CHUNK_BYTES = 256 * 1024


class _Described(msgspec.Struct, frozen=True):
    size: int
    files: int


async def bucket(js: JetStreamContext, org: str, *, replicas: int = 1) -> ObjectStore:
    """The org's bucket, made the first time it is needed."""
    name = subjects.code_bucket(org)
    try:
        return await js.object_store(name)
    except nats.js.errors.BucketNotFoundError:
        config = api.ObjectStoreConfig(
            bucket=name,
            description=f"code snapshots of org {org}",
            storage=api.StorageType.FILE,
            replicas=replicas,
        )
        return await js.create_object_store(name, config=config)


async def stored(store: ObjectStore, digest: str) -> CodeInfo | None:
    """What is stored under ``digest``; ``None`` if nothing is."""
    try:
        info = await store.get_info(digest)
    except nats.js.errors.ObjectNotFoundError:
        return None
    return _info(digest, info.description, info.mtime)


async def listed(store: ObjectStore) -> list[CodeInfo]:
    """Every snapshot stored (deleted ones left out)."""
    try:
        infos = await store.list(ignore_deletes=True)
    except nats.js.errors.NotFoundError:
        return []
    return [_info(i.name, i.description, i.mtime) for i in infos if not i.deleted]


async def delete(store: ObjectStore, digest: str) -> None:
    """Delete a snapshot (its chunks purged, a delete mark left)."""
    with contextlib.suppress(nats.js.errors.ObjectNotFoundError):
        await store.delete(digest)


async def orgs(js: JetStreamContext) -> list[str]:
    """The orgs that have a code bucket."""
    prefix = subjects.code_stream("")
    return [
        info.config.name[len(prefix) :]
        for info in await js.streams_info()
        if info.config.name and info.config.name.startswith(prefix)
    ]


async def put(store: ObjectStore, digest: str, data: bytes, *, size: int, files: int) -> CodeInfo:
    """Store a checked snapshot under its digest."""
    described = msgspec.json.encode(_Described(size=size, files=files)).decode()
    meta = api.ObjectMeta(
        name=digest,
        description=described,
        options=api.ObjectMetaOptions(max_chunk_size=CHUNK_BYTES),
    )
    info = await store.put(digest, data, meta=meta)
    return _info(digest, info.description, info.mtime)


async def read(js: JetStreamContext, org: str, digest: str) -> bytes:
    """A snapshot's bytes, read with message gets only (a daemon's grant).

    Raises:
        SnapshotNotFound: nothing is stored under ``digest`` in the org's bucket.
        Invalid: the object's chunks do not add up to what its meta says.
    """
    stream = subjects.code_stream(org)
    name = base64.urlsafe_b64encode(digest.encode()).decode()
    meta_subject = f"$O.{subjects.code_bucket(org)}.M.{name}"
    try:
        msg = await js.get_msg(stream, subject=meta_subject)
    except nats.js.errors.NotFoundError:
        raise SnapshotNotFound(f"code snapshot {digest} is not stored in org {org}") from None
    meta = json.loads(msg.data or b"{}")
    if meta.get("deleted"):
        raise SnapshotNotFound(f"code snapshot {digest} was deleted from org {org}")
    chunks, size = int(meta.get("chunks") or 0), int(meta.get("size") or 0)
    chunk_subject = f"$O.{subjects.code_bucket(org)}.C.{meta['nuid']}"
    parts: list[bytes] = []
    seq = 0
    for _ in range(chunks):
        chunk = await js.get_msg(stream, seq=seq + 1, subject=chunk_subject, next=True)
        seq = chunk.seq or seq + 1
        parts.append(chunk.data or b"")
    data = b"".join(parts)
    if len(data) != size:
        raise Invalid(f"code snapshot {digest}: read {len(data)} bytes, its meta says {size}")
    return data


def _info(digest: str, description: str | None, mtime: str | None) -> CodeInfo:
    try:
        described = msgspec.json.decode(description or "", type=_Described)
    except msgspec.DecodeError:  # written by hand, not by the control plane
        described = _Described(size=0, files=0)
    return CodeInfo(
        digest=digest,
        size=described.size,
        files=described.files,
        stored_at=datetime.fromisoformat(mtime) if mtime else None,
    )
