"""The SDK's fast path: submits and result waits over NATS, with HTTP behind them.

``udf`` submits and :class:`~lakeshore.sdk.invocation.Invocation` waits go here. On first
use the client asks the API where NATS is (``GET /v1/bus``) and logs in as a producer with
its token; each submit is then one NATS request to the control plane's gateway, and a
result wait one request answered the moment the Recorder accepts the outcome — no HTTP
round trips, no polling. Where the server allows it (``direct_submit``, experimental), a
plain submit is instead published straight into its queue's stream
(:mod:`lakeshore.sdk.direct`). The services behind both doors are the same, so answers and
errors are too.

HTTP is used instead, for the call at hand, when NATS cannot be reached from here (tried
again after :data:`RETRY_S`), when a request is larger than NATS takes, when NATS refuses
the subject (a namespace created after the connection was granted: the connection is
renewed), when no gateway answers (a control plane taking over as leader: HTTP then
follows the leader), and always with ``LAKESHORE_FAST_PATH=0``. A submit whose NATS request
timed out is not sent again over HTTP (it may have been admitted; it raises
:class:`~lakeshore.errors.Unavailable` as an HTTP timeout would) unless every invocation
in it has an idempotency key: then sending it again cannot make a second one. A result
wait not answered :data:`ANSWER_MARGIN_S` (at most the client's request timeout) after its
``wait_s`` — the gateway answers a held wait when it ends, finished or not — was held by
a control plane that died: it is asked again over HTTP, which rides out the restart.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import msgspec

from lakeshore.bus.denials import Denied
from lakeshore.errors import LakeshoreError, TooLarge, Unavailable
from lakeshore.model import (
    FastResult,
    FastSubmit,
    InvocationSubmit,
    Job,
    Result,
    SubmitAnswer,
)
from lakeshore.sdk.transport import error_from

if TYPE_CHECKING:
    from lakeshore.bus.producer import ProducerBus
    from lakeshore.sdk.client import Client
    from lakeshore.sdk.direct import Direct

log = logging.getLogger(__name__)

#: After NATS could not be reached, HTTP only for this long (seconds).
RETRY_S = 300.0
#: Bound on reaching NATS on first use (seconds).
CONNECT_TIMEOUT_S = 3.0
#: A held result wait not answered this long after its ``wait_s`` is taken for lost
#: (seconds): its control plane died holding it.
ANSWER_MARGIN_S = 5.0
#: The environment variable that turns the fast path off (``0``, ``false``, ``no``).
ENV_SWITCH = "LAKESHORE_FAST_PATH"

_submit_answer = msgspec.json.Decoder(SubmitAnswer)
_any = msgspec.json.Decoder()


def enabled_by_env() -> bool:
    """Whether the environment leaves the fast path on (the default)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


class FastPath:
    """The fast path of one client: one NATS connection, opened on first use.

    Args:
        client: the client whose API, token and timeouts it uses, and whose HTTP routes
            it falls back on.
    """

    def __init__(self, client: Client, token: str | None) -> None:
        self._client, self._token = client, token
        self._bus: ProducerBus | None = None
        #: direct submits, when the server allows them (``GET /v1/bus``)
        self._direct: Direct | None = None
        self._off_until = 0.0 if token and enabled_by_env() else float("inf")
        self._lock = asyncio.Lock()

    async def submit(
        self,
        queue: str,
        invocations: list[InvocationSubmit],
        *,
        wait_s: float | None,
        namespace: str | None,
    ) -> SubmitAnswer:
        """Submit like :meth:`~lakeshore.sdk.jobs.JobRoutes.submit` (and raise the same)."""
        ns = namespace or self._client.namespace
        bus = await self._connected()
        if bus is not None and self._direct is not None and self._direct.takes(invocations, wait_s):
            try:
                answer = await self._direct.submit(bus, ns, queue, invocations)
            except Denied:  # granted before the server allowed it: HTTP this time
                await self._renew()
                bus = None
            else:
                if answer is not None:
                    return answer
        if bus is not None:
            assert self._token is not None
            body = FastSubmit(
                token=self._token,
                invocations=invocations,
                **({} if wait_s is None else {"wait_s": wait_s}),
            )
            payload = msgspec.json.encode(body)
            if len(payload) <= bus.max_payload:
                timeout_s = self._client.timeout_s + (wait_s or 0.0)
                try:
                    raw = await bus.submit(ns, queue, payload, timeout_s)
                except Denied:
                    await self._renew()
                except Unavailable as e:
                    # Only a request that timed out may have reached a gateway; any other
                    # failure (no responders, above all) was not delivered.
                    if isinstance(e.__cause__, TimeoutError) and not _keyed(invocations):
                        raise
                    log.info("submit to %s/%s over HTTP: %s", ns, queue, e)
                else:
                    return _decode(raw, _submit_answer, f"submit to {ns}/{queue}")
        one = invocations[0] if len(invocations) == 1 else invocations
        return await self._client.submit(queue, one, wait_s=wait_s, namespace=namespace)

    async def result(self, job_id: str, wait_s: float, *, namespace: str | None) -> Result | Job:
        """Like :meth:`~lakeshore.sdk.jobs.JobRoutes.job_result` with ``wait_s``."""
        ns = namespace or self._client.namespace
        bus = await self._connected()
        if bus is not None:
            assert self._token is not None
            payload = msgspec.json.encode(FastResult(token=self._token, wait_s=wait_s))
            try:
                margin_s = min(ANSWER_MARGIN_S, self._client.timeout_s)
                raw = await bus.result(ns, job_id, payload, wait_s + margin_s)
                body = _decode(raw, _any, f"result of {ns}/{job_id}")
                return self._client.job_result(job_id, namespace=ns).decode(body)
            except Denied:
                await self._renew()
            except (TooLarge, Unavailable) as e:
                log.debug("result of %s over HTTP: %s", job_id, e)
        return await self._client.job_result(job_id, wait_s=wait_s, namespace=namespace)

    async def close(self) -> None:
        bus, self._bus, direct, self._direct = self._bus, None, self._direct, None
        if direct is not None:
            await direct.close()
        if bus is not None:
            await bus.close()

    async def _connected(self) -> ProducerBus | None:
        """The connection, opened on first use; ``None``: use HTTP this time."""
        if self._bus is not None or time.monotonic() < self._off_until:
            return self._bus
        async with self._lock:
            if self._bus is None and time.monotonic() >= self._off_until:
                try:
                    self._bus = await self._connect()
                except LakeshoreError as e:
                    self._off_until = time.monotonic() + RETRY_S
                    log.info("using HTTP only for %gs: NATS not reachable (%s)", RETRY_S, e)
        return self._bus

    async def _connect(self) -> ProducerBus:
        # Imported on first use: the CLI's commands never load nats.
        from lakeshore.bus.producer import ProducerBus

        assert self._token is not None
        access = await self._client.bus_access()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                bus = await ProducerBus.connect(access.nats_url, self._token, access.ca_pem)
        except TimeoutError:
            raise Unavailable(f"NATS at {access.nats_url} did not answer") from None
        if access.direct_submit:
            from lakeshore.sdk.direct import Direct

            self._direct = Direct(self._client)
        return bus

    async def _renew(self) -> None:
        """NATS refused a subject: the next call connects with a fresh grant."""
        log.info("NATS refused a request (a new namespace?); reconnecting with a new grant")
        await self.close()


def _keyed(invocations: list[InvocationSubmit]) -> bool:
    """Whether every invocation has an idempotency key (a submit safe to send again)."""
    return all(inv.idempotency_key is not None for inv in invocations)


def _decode(raw: bytes, decoder: msgspec.json.Decoder[Any], what: str) -> Any:
    """The gateway's answer, or the error it names raised as HTTP would raise it."""
    try:
        body = decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        body = None
    if body is None or isinstance(body, dict) and set(body) == {"error"}:
        raise error_from(0, raw, f"the {what} over NATS")
    return body


__all__ = ["ENV_SWITCH", "FastPath", "enabled_by_env"]
