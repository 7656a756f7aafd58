"""``max_lost``: lost attempts in a row before an invocation fails as ``lost_too_often``
(1–100, default 3), checked at admission with a 400 naming it, carried on the stream, and
offered by ``lakeshore submit --max-lost`` and ``@udf(max_lost=…)``."""

from __future__ import annotations

import msgspec
import pytest
from click.testing import CliRunner

from lakeshore.cli.main import lakeshore
from lakeshore.cli.submit import build
from lakeshore.model import Invocation
from lakeshore.sdk.udf import udf

Q = "/v1/namespaces/default/queues"


async def _stored(js) -> list[Invocation]:
    si = await js.stream_info("LS_default_q")
    msgs = [await js.get_msg("LS_default_q", s) for s in range(1, si.state.last_seq + 1)]
    return [msgspec.json.decode(m.data, type=Invocation) for m in msgs]


async def test_max_lost_is_stored_with_the_invocation_default_3(api, js):
    await api.post(Q, {"name": "q"})
    batch = [{"fn": "m:f"}, {"fn": "m:f", "max_lost": 7}]
    status, body = await api.post(Q + "/q/invocations", {"invocations": batch})
    assert status == 202, body
    assert [i.max_lost for i in await _stored(js)] == [3, 7]


@pytest.mark.parametrize("value", [0, 101, -1])
async def test_a_max_lost_out_of_range_is_a_400_naming_it(api, js, value):
    await api.post(Q, {"name": "q"})
    status, answer = await api.post(Q + "/q/invocations", {"fn": "m:f", "max_lost": value})
    assert status == 400, answer
    needle = f"the invocation: max_lost must be between 1 and 100 (got {value})"
    assert needle in answer["error"]["message"]
    assert (await js.stream_info("LS_default_q")).state.messages == 0


def test_submit_takes_max_lost_in_range():
    assert (
        build(command=("true",), fn=None, args=None, kwargs=None, env=(), max_lost=5).max_lost == 5
    )
    result = CliRunner().invoke(lakeshore, ["submit", "-q", "q", "--max-lost", "0", "--", "true"])
    assert result.exit_code == 2 and "--max-lost" in result.output


def _f() -> None:
    return None


def test_udf_takes_max_lost_and_refuses_one_out_of_range():
    assert udf(queue="q", max_lost=9)(_f).options(priority=0)._options.max_lost == 9
    with pytest.raises(ValueError, match=r"max_lost must be between 1 and 100 \(got 0\)"):
        udf(queue="q", max_lost=0)(_f)
