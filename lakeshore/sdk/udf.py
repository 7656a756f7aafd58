"""``@udf``: a module-level function that can also run on a daemon.

The daemon runs ``fn`` by importing ``module:qualname``, so only functions reachable that
way are accepted: module-level ``def`` or ``async def``, not lambdas, nested functions or
methods. A function defined in a script run as ``python tasks.py`` is named by the
script's module name (``tasks``), which the daemon can import when the script's directory
is on its ``PYTHONPATH``.

Arguments travel as JSON (msgspec), so they must be JSON builtins or types msgspec
encodes (dataclasses, Structs, datetimes, …, which arrive as their JSON form).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, ParamSpec, TypeVar, overload

import msgspec

from lakeshore.code.snapshot import directory_of
from lakeshore.errors import Invalid, SnapshotNotFound
from lakeshore.model import (
    DEFAULT_MAX_LOST,
    DEFAULT_STOP_GRACE_S,
    MAX_BATCH,
    InvocationSubmit,
    Resources,
    SubmitAnswer,
    check_max_lost,
    check_resources,
    check_stop_grace,
)
from lakeshore.sdk import sync
from lakeshore.sdk.client import Client
from lakeshore.sdk.code import SHIPPER
from lakeshore.sdk.invocation import Invocation

log = logging.getLogger(__name__)

_json_encoder = msgspec.json.Encoder()
_json = msgspec.json.Decoder()

P = ParamSpec("P")
R = TypeVar("R")


def function_ref(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a function the daemon can import.

    Raises:
        TypeError: ``fn`` is not a plain function, or is a lambda, a nested function or a
            method, which the daemon cannot import by name.
    """
    if not inspect.isfunction(fn):
        raise TypeError(
            f"@udf needs a function defined with def or async def, got {type(fn).__name__} {fn!r}"
        )
    name, qualname = fn.__name__, fn.__qualname__
    if name == "<lambda>":
        raise TypeError(
            "@udf cannot take a lambda: the daemon imports the function by name; "
            "define it with def at module level"
        )
    if "<locals>" in qualname:
        raise TypeError(
            f"@udf cannot take the nested function {qualname!r}: the daemon imports the "
            "function by name; move it to module level"
        )
    if "." in qualname:
        raise TypeError(
            f"@udf cannot take the method {qualname!r}: the daemon calls the function "
            "without an instance; make it a module-level function"
        )
    return f"{_module_name(fn)}:{qualname}"


def _module_name(fn: Callable[..., Any]) -> str:
    """The importable name of ``fn``'s module (for ``__main__``: the script's own name)."""
    module = fn.__module__
    if module != "__main__":
        return module
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:  # run with python -m pkg.mod
        return spec.name
    path = getattr(main, "__file__", None)
    if path is None:
        raise TypeError(
            f"@udf cannot take {fn.__qualname__!r}, defined in an interactive session: the "
            "daemon imports the function by name; define it in a module (a .py file)"
        )
    return Path(path).stem


def encode_arguments(fn_ref: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``(args, kwargs)`` as JSON builtins, as the daemon will receive them.

    Raises:
        TypeError: an argument msgspec cannot encode as JSON, named by position or keyword.
    """
    named = [(f"argument {i}", v) for i, v in enumerate(args)]
    named += [(f"keyword argument {k!r}", v) for k, v in kwargs.items()]
    out = []
    for what, value in named:
        try:
            out.append(_json.decode(_json_encoder.encode(value)))
        except (TypeError, msgspec.EncodeError) as e:
            raise TypeError(
                f"{what} of {fn_ref} cannot be sent as JSON ({e}); pass JSON-able values "
                "(dict, list, str, int, float, bool, None, dataclasses, Structs, …)"
            ) from None
    return out[: len(args)], dict(zip(kwargs, out[len(args) :], strict=True))


class Udf(Generic[P, R]):
    """A function that runs locally when called and on a daemon when submitted.

    Calling it (``f(x)``) is calling the function. The options are those of each
    invocation it submits (see :func:`udf`).
    """

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        queue: str,
        timeout: float | None,
        max_attempts: int,
        priority: int,
        namespace: str | None,
        idempotency_key: str | None = None,
        stop_grace_s: float = DEFAULT_STOP_GRACE_S,
        isolation: str = "process",
        max_lost: int = DEFAULT_MAX_LOST,
        code: str | os.PathLike[str] | None = None,
        gpus: int = 0,
        gpu_type: str | None = None,
        cpus: float | None = None,
        memory: str | None = None,
    ) -> None:
        self.fn = fn
        #: the directory shipped with each submit (``None``: :func:`configure`'s, if any)
        self.code = None if code is None else directory_of(code)
        #: ``module:qualname``, what the daemon imports
        self.ref = function_ref(fn)
        self.queue, self.namespace = queue, namespace
        options = {
            "fn": self.ref,
            "timeout_s": timeout,
            "max_attempts": max_attempts,
            "priority": priority,
            "idempotency_key": idempotency_key,
            "stop_grace_s": stop_grace_s,
            "isolation": isolation,
            "max_lost": max_lost,
            "resources": _resources(gpus, gpu_type, cpus, memory),
        }
        try:
            self._options = msgspec.convert(options, InvocationSubmit)
            where = f"invalid @udf option for {self.ref}"
            check_stop_grace(where, self._options.stop_grace_s)
            check_max_lost(where, self._options.max_lost)
            if self._options.resources is not None:
                check_resources(where, self._options.resources)
        except msgspec.ValidationError as e:
            raise ValueError(f"invalid @udf option for {self.ref}: {e}") from None
        except Invalid as e:
            raise ValueError(str(e)) from None
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<udf {self.ref} on queue {self.queue!r}>"

    def options(self, **changes: Any) -> Udf[P, R]:
        """A copy with some of :func:`udf`'s options changed, e.g. ``f.options(priority=9)``;
        ``idempotency_key="k"`` makes its submits idempotent (one key, one invocation)."""
        current = {
            "queue": self.queue,
            "timeout": self._options.timeout_s,
            "max_attempts": self._options.max_attempts,
            "priority": self._options.priority,
            "namespace": self.namespace,
            "idempotency_key": self._options.idempotency_key,
            "stop_grace_s": self._options.stop_grace_s,
            "isolation": self._options.isolation.value,
            "max_lost": self._options.max_lost,
            "code": self.code,
            **_resource_options(self._options.resources),
        }
        unknown = set(changes) - set(current)
        if unknown:
            raise TypeError(f"unknown udf option(s): {', '.join(sorted(unknown))}")
        return Udf(self.fn, **{**current, **changes})

    def local(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Run it in this process the way a daemon would.

        The arguments and the return value go through JSON, as on a daemon; a coroutine
        function is run to completion with ``asyncio.run`` (so not from a running loop).

        Raises:
            TypeError: an argument cannot be sent as JSON.
            Exception: whatever the function raises.
        """
        args_, kwargs_ = encode_arguments(self.ref, args, kwargs)
        value = self.fn(*args_, **kwargs_)
        if inspect.isawaitable(value):
            value = asyncio.run(_await(value))
        return _json.decode(_json_encoder.encode(value))

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> Invocation:
        """Submit one call to the queue; it returns once the queue has admitted it.

        Raises:
            TypeError: an argument cannot be sent as JSON.
            LakeshoreError: the API refused (unknown queue, draining, full, …).
        """
        spec = self._spec(args, kwargs)
        [inv] = sync.call(lambda c: self._send(c, [spec]))
        return inv

    async def asubmit(self, *args: P.args, **kwargs: P.kwargs) -> Invocation:
        """:meth:`submit` as a coroutine."""
        spec = self._spec(args, kwargs)
        [inv] = await sync.acall(lambda c: self._send(c, [spec]))
        return inv

    def map(self, items: Iterable[Any]) -> list[Invocation]:
        """Submit one call per item (``f(item)``), in batches of up to 10,000 per request.

        Raises:
            TypeError: an item cannot be sent as JSON (nothing is submitted).
            ValueError: an ``idempotency_key`` is set: it names one invocation, not many.
            LakeshoreError: the API refused a batch; earlier batches stay submitted.
        """
        if self._options.idempotency_key is not None:
            raise ValueError(
                f"{self.ref} has idempotency_key {self._options.idempotency_key!r}, which names "
                "one invocation; map submits many: drop the key, or submit each with its own"
            )
        specs = []
        for i, item in enumerate(items):
            try:
                specs.append(self._spec((item,), {}))
            except TypeError as e:
                raise TypeError(f"map item {i}: {e}") from None
        return sync.call(lambda c: self._send(c, specs)) if specs else []

    def _spec(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> InvocationSubmit:
        args_, kwargs_ = encode_arguments(self.ref, args, kwargs)
        return msgspec.structs.replace(self._options, args=args_, kwargs=kwargs_)

    async def _send(self, client: Client, specs: list[InvocationSubmit]) -> list[Invocation]:
        directory = self.code or sync.shipped_code()
        if directory is None:
            return await self._batches(client, specs)
        digest = await SHIPPER.ship(client, directory, self.namespace)
        shipped = [msgspec.structs.replace(spec, code=digest) for spec in specs]
        try:
            return await self._batches(client, shipped)
        except SnapshotNotFound:  # deleted by the server's retention since it was shipped
            SHIPPER.forget(client, digest, self.namespace)
            digest = await SHIPPER.ship(client, directory, self.namespace)
            shipped = [msgspec.structs.replace(spec, code=digest) for spec in specs]
            return await self._batches(client, shipped)

    async def _batches(self, client: Client, specs: list[InvocationSubmit]) -> list[Invocation]:
        out: list[Invocation] = []
        for start in range(0, len(specs), MAX_BATCH):
            chunk = specs[start : start + MAX_BATCH]
            answer = await client.fast.submit(
                self.queue, chunk, wait_s=None, namespace=self.namespace
            )
            out.extend(_handles(answer))
        return out


def _resources(
    gpus: int, gpu_type: str | None, cpus: float | None, memory: str | None
) -> dict[str, Any] | None:
    """The request the options make; ``None`` when they ask nothing beyond the defaults."""
    given = {"gpus": gpus or None, "gpu_type": gpu_type, "cpus": cpus, "memory": memory}
    asked = {k: v for k, v in given.items() if v is not None}
    return asked or None


def _resource_options(r: Resources | None) -> dict[str, Any]:
    if r is None:
        return {"gpus": 0, "gpu_type": None, "cpus": None, "memory": None}
    return {"gpus": r.gpus, "gpu_type": r.gpu_type, "cpus": r.cpus, "memory": r.memory}


def _handles(answer: SubmitAnswer) -> list[Invocation]:
    for warning in answer.warnings:
        log.warning("submit to queue %s: %s", answer.queue, warning)
    warnings = tuple(answer.warnings)
    return [
        Invocation(i, namespace=answer.namespace, queue=answer.queue, warnings=warnings)
        for i in answer.ids
    ]


async def _await(awaitable: Any) -> Any:
    return await awaitable


@overload
def udf(fn: Callable[P, R], /) -> Udf[P, R]: ...


@overload
def udf(
    *,
    queue: str = "default",
    timeout: float | None = None,
    max_attempts: int = 1,
    priority: int = 0,
    namespace: str | None = None,
    stop_grace_s: float = DEFAULT_STOP_GRACE_S,
    isolation: str = "process",
    max_lost: int = DEFAULT_MAX_LOST,
    code: str | os.PathLike[str] | None = None,
    gpus: int = 0,
    gpu_type: str | None = None,
    cpus: float | None = None,
    memory: str | None = None,
) -> Callable[[Callable[P, R]], Udf[P, R]]: ...


def udf(
    fn: Callable[P, R] | None = None,
    /,
    *,
    queue: str = "default",
    timeout: float | None = None,
    max_attempts: int = 1,
    priority: int = 0,
    namespace: str | None = None,
    stop_grace_s: float = DEFAULT_STOP_GRACE_S,
    isolation: str = "process",
    max_lost: int = DEFAULT_MAX_LOST,
    code: str | os.PathLike[str] | None = None,
    gpus: int = 0,
    gpu_type: str | None = None,
    cpus: float | None = None,
    memory: str | None = None,
) -> Any:
    """Make a module-level function submittable: ``@udf(queue="cpu-prep")`` (or ``@udf``).

    The decorated function stays callable as before, and gains ``.submit(*args,
    **kwargs) -> Invocation``, ``.map(items) -> list[Invocation]``, ``.local(...)`` and
    ``.options(...)``. Submissions go to the API chosen by
    :func:`lakeshore.sdk.configure` (by default the one the environment and
    ``.lakeshore/config.toml`` name).

    Args:
        queue: the queue its invocations go to.
        timeout: a run longer than this many seconds is killed and counts as failed.
        max_attempts: tries before the invocation fails, 1–100.
        priority: 0–9, higher first (priority queues only).
        namespace: the queue's namespace; ``None`` is the configured client's.
        stop_grace_s: a stopped run (cancelled, timed out, its daemon stopping) gets
            SIGTERM, then SIGKILL this many seconds later, 0–3600; in the function,
            SIGTERM raises ``RunStopped`` (a ``BaseException``), so ``finally:`` runs.
        isolation: ``"process"`` (default): each run in a worker process of its daemon,
            stoppable, crashing alone, re-imported when its module changed;
            ``"inline"``: on a thread of the daemon, for tiny pure-Python functions —
            it cannot be stopped (a stopped run goes on, its result discarded).
        max_lost: after this many lost attempts in a row (the daemon running it died each
            time) the invocation fails as ``lost_too_often`` instead of running again, 1–100.
        code: ship this directory (resolved now: ``"."`` is the current directory) with
            each submit; the daemon runs the function with the directory's snapshot first
            on ``sys.path`` and as its working directory. ``None``: the directory
            :func:`~lakeshore.sdk.configure` named, else the daemon's own path.
        gpus, gpu_type, cpus, memory: what each run holds of its daemon's machine
            (spec/resources.md): GPUs (0–64) of a type (``"H100"``; ``None``: any), CPUs
            (default 1) and memory with a unit (``"32G"``; ``None``: not tracked).

    Raises:
        TypeError: the function cannot be imported by name on a daemon (a lambda, a
            nested function, a method).
        ValueError: an option is out of range (the message names it, e.g. ``$.priority``).
        Invalid: ``code`` is not a directory.
    """

    def wrap(f: Callable[P, R]) -> Udf[P, R]:
        return Udf(
            f,
            queue=queue,
            timeout=timeout,
            max_attempts=max_attempts,
            priority=priority,
            namespace=namespace,
            stop_grace_s=stop_grace_s,
            isolation=isolation,
            max_lost=max_lost,
            code=code,
            gpus=gpus,
            gpu_type=gpu_type,
            cpus=cpus,
            memory=memory,
        )

    return wrap if fn is None else wrap(fn)


__all__ = ["Udf", "encode_arguments", "function_ref", "udf"]
