"""What a retry of a job submits: the body its ``submitted`` event kept, for a job that
ended without its value.

A function's ``args`` and ``kwargs`` are kept while small
(:data:`~lakeshore.submission.MAX_KEPT_BODY_BYTES`); a command's ``env`` values are
kept nowhere (:mod:`lakeshore.model.redact`), only its keys, so a retry gives them again.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lakeshore.errors import Conflict, Invalid
from lakeshore.model import (
    DEFAULT_MAX_LOST,
    DEFAULT_STOP_GRACE_S,
    RETRIED_STATES,
    InvocationSubmit,
    Isolation,
    Job,
    Resources,
)
from lakeshore.submission import MAX_CARRIED_BYTES, MAX_KEPT_BODY_BYTES


def retried(job: Job, submitted: dict[str, Any], env: dict[str, str] | None) -> InvocationSubmit:
    """What a retry of ``job`` submits: the body its ``submitted`` event kept.

    Raises:
        Conflict: ``job`` is not in a state a retry is for, or its body was not kept.
        Invalid: ``env`` does not give every key the job's command had.
    """
    if job.state not in RETRIED_STATES:
        raise Conflict(
            f"job {job.id!r} is {job.state.value}: only a failed, cancelled or dropped job "
            f"is retried; see it with `lakeshore jobs show {job.id}`"
        )
    if submitted.get("partial"):
        raise Conflict(
            f"job {job.id!r} is not retried: its record was made from its claim (its "
            f"submit's own was never stored), which keeps no arguments or argv over "
            f"{MAX_CARRIED_BYTES // 1024} KiB; submit it again with `lakeshore submit`"
        )
    if job.fn is not None and "args" not in submitted:
        raise Conflict(
            f"job {job.id!r} is not retried: its arguments were too large to keep (more "
            f"than {MAX_KEPT_BODY_BYTES // 1024} KiB); submit it again with `lakeshore submit`"
        )
    needed = submitted.get("env_keys") or []
    if env is not None and job.fn is not None:
        raise Invalid(f"job {job.id!r} runs a function: env is for commands")
    missing = [k for k in needed if k not in (env or {})]
    if missing:
        keys = ", ".join(missing)
        raise Invalid(
            f"job {job.id!r} ran with env {keys}, whose values are kept nowhere; give them "
            f"again: `lakeshore jobs retry {job.id} --env KEY=VALUE`"
        )
    return InvocationSubmit(
        fn=job.fn, args=submitted.get("args") or [], kwargs=submitted.get("kwargs") or {},
        command=job.command, env=env or {}, priority=job.priority,
        timeout_s=submitted.get("timeout_s"), max_attempts=job.max_attempts, retry_of=job.id,
        # A job submitted before stop_grace_s existed has none kept: it gets the default.
        stop_grace_s=submitted.get("stop_grace_s", DEFAULT_STOP_GRACE_S),
        isolation=Isolation(submitted.get("isolation") or Isolation.PROCESS),
        max_lost=submitted.get("max_lost", DEFAULT_MAX_LOST),
        code=submitted.get("code"),  # the same snapshot: the retry runs what failed
        resources=resources_of(submitted),
    )  # fmt: skip


def resources_of(submitted: dict[str, Any]) -> Resources | None:
    """The request a ``submitted`` event kept (``None``: none beyond the defaults)."""
    kept = submitted.get("resources")
    return None if not kept else msgspec.convert(kept, Resources)


__all__ = ["resources_of", "retried"]
