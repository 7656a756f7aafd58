"""Idempotency policy of a queue: which invocation a submit's keys name, durably.

A key seen within the server's ``idempotency_ttl_s`` names its first invocation's id; a new
key is stored with the new id *before* anything is published, so that a crash after the
publish still finds it on the retry. A key whose invocation is already recorded is not
published again (JetStream's 600 s duplicate window may be long past). The same key with
another body is a conflict, not a retry.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

import msgspec

from lakeshore.bus import codec
from lakeshore.errors import Conflict
from lakeshore.faults import Faults
from lakeshore.model import InvocationSubmit, now
from lakeshore.store.port import IdempotencyKeys, StoredKey

#: How long a key names its invocation unless the server says otherwise (seconds).
DEFAULT_KEY_TTL_S = 7 * 86400.0


def body_digest(spec: InvocationSubmit) -> str:
    """A digest of what a submit asks for, its idempotency key aside."""
    body = codec.encode(msgspec.structs.replace(spec, idempotency_key=None))
    return hashlib.sha256(body).hexdigest()[:32]


async def resolve_keys(
    store: IdempotencyKeys,
    namespace: str,
    queue: str,
    specs: list[InvocationSubmit],
    fresh: list[str],
    *,
    ttl_s: float,
    faults: Faults,
) -> tuple[list[str], set[str]]:
    """The id of each invocation of a submit, its keys resolved (and new ones stored).

    Args:
        fresh: a new id per invocation, used where no key names one yet.

    Returns:
        The ids, and those already recorded (not to be published again).

    Raises:
        Conflict: a key came with another body than the first time (nothing is stored).
    """
    digests: dict[str, str] = {}
    for spec in specs:
        key = spec.idempotency_key
        if key is not None and digests.setdefault(key, body_digest(spec)) != body_digest(spec):
            raise key_conflict(key, "twice in this batch")
    since = now() - timedelta(seconds=ttl_s)
    stored = await store.get_keys(namespace, queue, list(digests), since)
    for key, found in stored.items():
        if found.digest != digests[key]:
            raise key_conflict(key, f"by invocation {found.invocation_id}")
    new: dict[str, StoredKey] = {}
    ids = list(fresh)
    for i, spec in enumerate(specs):
        key = spec.idempotency_key
        if key is None:
            continue
        entry = stored.get(key) or new.get(key)
        if entry is None:
            entry = new[key] = StoredKey(invocation_id=fresh[i], digest=digests[key])
        ids[i] = entry.invocation_id
    await store.put_keys(namespace, queue, new, now())
    faults.hit("submit.keys_stored")
    old = [entry.invocation_id for entry in stored.values()]
    known = await store.recorded_ids(namespace, old) if old else set()
    return ids, known


def key_conflict(key: str, where: str) -> Conflict:
    return Conflict(
        f"idempotency key {key!r} was used {where} with another body; a key names one "
        "invocation — retry with the same body, or use a new key"
    )
