"""``--config K=V`` of ``lakeshore providers``: one parser types every value, against a
real control plane."""

from __future__ import annotations

import json

from lakeshore.cli.exits import USAGE


async def config_of(cli, name: str) -> dict:
    return json.loads((await cli("providers", "show", name, "-o", "json")).stdout)["config"]


async def test_config_values_are_typed_and_a_json_string_stays_a_string(cli):
    await cli(
        "providers", "add", "typed", "--kind", "external",
        "--config", "port=2222", "--config", "ratio=0.5", "--config", "debug=true",
        "--config", "quiet=false", "--config", "key=null", "--config", "hosts=[gpu1, gpu2]",
        "--config", "env={A: b}", "--config", "gres=gpu:1", "--config", "time=04:00:00",
        "--config", "mode=0755", "--config", "answer=yes", "--config", 'code="2222"',
    )  # fmt: skip
    assert await config_of(cli, "typed") == {
        "port": 2222,
        "ratio": 0.5,
        "debug": True,
        "quiet": False,
        "key": None,
        "hosts": ["gpu1", "gpu2"],
        "env": {"A": "b"},
        "gres": "gpu:1",
        "time": "04:00:00",
        "mode": "0755",
        "answer": "yes",
        "code": "2222",
    }


async def test_patch_types_its_values_like_add(cli):
    await cli("providers", "add", "p", "--kind", "external", "--config", "port=22")
    await cli("providers", "patch", "p", "--config", "port=2222", "--config", "slots=4")
    assert await config_of(cli, "p") == {"port": 2222, "slots": 4}


async def test_an_unterminated_json_string_is_a_usage_error_saying_how_to_quote(cli):
    bad = await cli(
        "providers", "add", "x", "--kind", "external", "--config", 'code="22', expect=USAGE
    )
    assert 'code="22' in bad.stderr and "JSON string" in bad.stderr


async def test_the_help_says_how_to_keep_a_number_a_string(cli):
    shown = " ".join((await cli("providers", "add", "--help")).stdout.split())
    assert "port=2222 is a number" in shown and "port='\"2222\"'" in shown
