"""``lakeshore compose schema``: the JSON Schema of the file, for editors.

The schema is checked with ``jsonschema_rs``, a JSON Schema validator that is already in
the dev environment (schemathesis depends on it); no dependency is added for it.
"""

from __future__ import annotations

import json

import jsonschema_rs
import msgspec
import yaml
from click.testing import CliRunner
from composing import EXAMPLE

from lakeshore.cli.main import lakeshore
from lakeshore.compose import ComposeFile, schema
from lakeshore.compose.schema import DIALECT


def validator():
    return jsonschema_rs.validator_for(schema())


def test_the_schema_validates_the_spec_example():
    example = yaml.safe_load(EXAMPLE)
    assert validator().is_valid(example)
    # msgspec, the loader's own converter, takes the same document.
    assert msgspec.convert(example, ComposeFile).namespace == "default"


def test_the_schema_refuses_what_the_loader_refuses():
    example = yaml.safe_load(EXAMPLE)
    v = validator()
    assert not v.is_valid({**example, "projct": "x"})
    assert not v.is_valid({"queues": {"Cpu_Prep": {}}})
    assert not v.is_valid({"queues": {"q": {"kind": "lifo"}}})
    assert not v.is_valid({"queues": {"q": {"elasticity": {"kind": "elastic", "mn": 1}}}})
    assert not v.is_valid({"daemons": {"d": {"count": "two"}}})
    assert not v.is_valid({"providers": {"p": {"config": {}}}})  # kind is required


def test_the_schema_describes_every_section_and_elasticity_field():
    doc = schema()
    assert doc["$schema"] == DIALECT and doc["title"] == "lakeshore.yaml"
    defs = doc["$defs"]
    top = defs["ComposeFile"]
    assert top["additionalProperties"] is False
    assert set(top["properties"]) == {
        *"project namespace namespaces providers queues daemons".split()
    }
    assert set(defs["QueueSpec"]["properties"]) == {
        *"kind description max_depth on_full elasticity labels code defaults".split()
    }
    assert set(defs["ElasticitySpec"]["properties"]) >= {
        *"kind min max provider pool match steal_delay_s cost_weight".split()
    }
    assert defs["ElasticitySpec"]["required"] == []
    assert set(defs["DaemonSpec"]["properties"]) == {*"provider queues count labels name".split()}
    assert defs["ProviderSpec"]["required"] == ["kind"]


def test_the_command_prints_the_schema():
    result = CliRunner().invoke(lakeshore, ["compose", "schema"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == schema()
