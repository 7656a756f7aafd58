"""Reading and checking ``lakeshore.yaml``: every problem at its line and column."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from composing import EXAMPLE

from lakeshore.cli.exits import API_ERROR, USAGE
from lakeshore.cli.main import lakeshore
from lakeshore.compose import ComposeFileInvalid, load, parse
from lakeshore.compose.loader import project_from_dir
from lakeshore.errors import Invalid
from lakeshore.model import ElasticityKind, QueueKind


def problems(text: str) -> list[str]:
    with pytest.raises(ComposeFileInvalid) as caught:
        parse(textwrap.dedent(text), "lakeshore.yaml")
    return caught.value.message.splitlines()


def test_the_spec_example_loads():
    spec = parse(EXAMPLE)
    (ns,) = spec.by_namespace("other").items()
    name, body = ns
    assert name == "default"
    assert body.queues["training-h100"].kind is QueueKind.PRIORITY
    assert body.queues["training-h100"].elasticity.kind is ElasticityKind.ELASTIC
    assert body.daemons["train"].labels == {"gpu": "h100"}
    assert body.daemons["prep"].count == 4


def test_several_namespaces_and_the_cli_namespace_as_default():
    spec = parse("namespaces:\n  a: {queues: {q: {}}}\n  b: {daemons: {d: {}}}\n")
    assert list(spec.by_namespace("x")) == ["a", "b"]
    assert list(parse("queues: {q: {}}\n").by_namespace("bob")) == ["bob"]


def test_an_unknown_key_is_reported_at_the_key_with_a_suggestion():
    assert problems("""\
        queues:
          q: {kind: fifo, max_dept: 3}
    """) == [
        "lakeshore.yaml:2:19: unknown key 'max_dept' in queue q: did you mean 'max_depth'? "
        "known keys: kind, description, max_depth, on_full, elasticity, labels, code, defaults"
    ]


def test_a_bad_name_is_reported_at_the_key():
    (line,) = problems("queues:\n  Cpu_Prep: {}\n")
    assert line.startswith("lakeshore.yaml:2:3: invalid queue name 'Cpu_Prep': use lowercase")


def test_a_bad_elasticity_is_reported_with_the_servers_message():
    (line,) = problems("""\
        queues:
          q:
            elasticity: {kind: elastic, min: 3, max: 2}
    """)
    assert line == "lakeshore.yaml:3:17: queue q: elasticity max (2) must be ≥ min (3)"


def test_a_wrong_type_is_reported_at_the_value():
    (line,) = problems("daemons:\n  prep: {count: four}\n")
    assert line == "lakeshore.yaml:2:17: daemon group prep: count: expected `int`, got `str`"


def test_an_unknown_enum_value_lists_the_choices():
    (line,) = problems("queues:\n  q: {on_full: wait}\n")
    assert line == (
        "lakeshore.yaml:2:16: queue q: on_full: invalid enum value 'wait'; "
        "use one of reject, drop_oldest, block"
    )


def test_every_problem_is_reported_at_once_in_file_order():
    found = problems("""\
        projct: x
        queues:
          a: {kind: fifo, max_depth: 0}
          a: {}
          b: {elasticity: {kind: burst}}
        daemons:
          d: {queues: [default], labels: {lakeshore.io/project: x}}
          e: {name: d}
        providers:
          local: {kind: local}
          gpu: {kind: ssh, config: {user: lake}}
    """)
    assert [line.split(": ", 1)[0] for line in found] == [
        "lakeshore.yaml:1:1",
        "lakeshore.yaml:3:30",
        "lakeshore.yaml:4:3",
        "lakeshore.yaml:5:19",
        "lakeshore.yaml:7:16",
        "lakeshore.yaml:7:35",
        "lakeshore.yaml:8:13",
        "lakeshore.yaml:10:3",
        "lakeshore.yaml:11:28",
    ]
    assert "duplicate key 'a' (first at line 3)" in found[2]
    assert "needs max ≥ 1" in found[3]
    assert "ssh provider config needs hosts" in found[8]


def test_yaml_that_would_be_read_silently_otherwise_is_refused():
    found = problems("""\
        queues:
          a: &same {}
          b: *same
          <<: {c: {}}
          1: {}
    """)
    assert [line.split(": ", 1)[0] for line in found] == [
        "lakeshore.yaml:3:6",
        "lakeshore.yaml:4:3",
        "lakeshore.yaml:5:3",
    ]
    assert "alias *same is not supported" in found[0]
    assert "merge keys (<<) are not supported" in found[1]


def test_namespaces_exclude_the_top_sections():
    (line,) = problems("namespaces:\n  a: {}\nqueues: {}\n")
    assert line.startswith("lakeshore.yaml:3:1: queues cannot be given with `namespaces`")


def test_a_syntax_error_has_its_place():
    (line,) = problems("queues: {q: {}\n")
    assert line.startswith("lakeshore.yaml:2:1: not valid YAML")


def test_the_project_defaults_to_the_file_then_the_directory(tmp_path: Path):
    directory = tmp_path / "My Team_Project!"
    directory.mkdir()
    path = directory / "lakeshore.yaml"
    path.write_text("queues: {}\n")
    assert load(str(path)).project == "my-team-project"
    assert load(str(path), project="given").project == "given"
    path.write_text("project: named\nqueues: {}\n")
    assert load(str(path)).project == "named"
    with pytest.raises(Invalid, match="set `project:`"):
        project_from_dir(tmp_path / "___" / "lakeshore.yaml")


async def test_an_invalid_file_exits_1_and_sends_nothing(cli, compose_file, live):
    compose_file("""\
        providers:
          gpu: {kind: ssh, config: {hosts: [127.0.0.1]}}
        queues:
          Bad: {}
          ok: {kind: fifo, bogus: 1}
          el: {elasticity: {kind: elastic, min: 5, max: 1}}
          typed: {max_depth: lots}
        daemons:
          prep: {queues: [ok], count: 1}
    """)
    result = await cli("compose", "up", expect=API_ERROR)
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "lakeshore.yaml:4:3: invalid queue name 'Bad': use lowercase letters, digits and '-', "
        "starting and ending with a letter or digit (^[a-z0-9]([a-z0-9-]*[a-z0-9])?$)",
        "lakeshore.yaml:5:20: unknown key 'bogus' in queue ok: known keys: kind, description, "
        "max_depth, on_full, elasticity, labels, code, defaults",
        "lakeshore.yaml:6:20: queue el: elasticity max (1) must be ≥ min (5)",
        "lakeshore.yaml:7:22: queue typed: max_depth: expected `int | null`, got `str`",
        "error: 4 problems in lakeshore.yaml; nothing was sent",
    ]
    await cli("compose", "diff", expect=API_ERROR)
    assert list(await live.queues()) == ["default"]
    assert list(await live.providers()) == ["local"]
    assert await live.workers() == {}


def test_variables_are_replaced_in_string_values_and_typed_when_plain():
    spec = parse(
        textwrap.dedent("""\
            providers:
              gpu:
                kind: ssh
                config:
                  hosts: ["${HOST}"]
                  port: ${PORT:-2222}
                  python: "${VENV}/bin/python"
                  log_dir: "$${literal}"
        """),
        env={"HOST": "gpu1", "VENV": "/opt/venv"},
    )
    assert spec.providers["gpu"].config == {
        "hosts": ["gpu1"],
        "port": 2222,
        "python": "/opt/venv/bin/python",
        "log_dir": "${literal}",
    }
    # Without an environment nothing is replaced.
    assert parse('queues:\n  q: {description: "${X}"}\n').queues["q"].description == "${X}"


def test_an_unset_variable_is_reported_at_its_value():
    with pytest.raises(ComposeFileInvalid) as caught:
        parse('queues:\n  q: {description: "${NOPE}"}\n', env={})
    assert caught.value.message == (
        "lakeshore.yaml:2:20: variable NOPE is not set: set it, or give a default as ${NOPE:-value}"
    )


def test_a_missing_file_is_a_usage_error(project_dir: Path):
    result = CliRunner().invoke(lakeshore, ["compose", "diff"])
    assert result.exit_code == USAGE
    assert "'lakeshore.yaml' does not exist" in result.stderr
