from __future__ import annotations

import stat
import tomllib
from pathlib import Path

import pytest

from lakeshore.config import (
    ClientSettings,
    ServerSettings,
    load_client_settings,
    load_server_settings,
    read_toml,
    write_client_config,
)
from lakeshore.errors import Invalid
from lakeshore.quotas import Quotas


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Relative defaults (./.lakeshore) must never see the developer's own files.
    monkeypatch.chdir(tmp_path)


# --- server ------------------------------------------------------------------------------


def test_server_defaults_without_any_source(tmp_path: Path) -> None:
    settings = load_server_settings({}, env={})
    assert settings == ServerSettings(data_dir=tmp_path / ".lakeshore")
    assert (settings.host, settings.port, settings.nats_url) == ("127.0.0.1", 8080, None)
    assert (settings.nats_port, settings.replicas) == (4222, 1)


def test_server_sources_apply_file_then_env_then_flags(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "server.toml").write_text(
        'host = "0.0.0.0"\nport = 9000\nnats_port = 5000\nreplicas = 2\ntick_s = 2\n'
        'nats_url = "nats://file:4222"\n'
    )
    env = {
        "LAKESHORE_DATA_DIR": str(data),
        "LAKESHORE_PORT": "9100",
        "LAKESHORE_NATS_PORT": "5100",
        "LAKESHORE_REPLICAS": "3",
        "LAKESHORE_NATS_URL": "nats://env:4222",
    }
    flags = {"replicas": 5, "nats_url": None, "host": None, "port": None}
    settings = load_server_settings(flags, env=env)
    assert settings.data_dir == data
    assert settings.host == "0.0.0.0"
    assert settings.tick_s == 2.0
    assert (settings.port, settings.nats_port) == (9100, 5100)
    assert settings.nats_url == "nats://env:4222"
    assert settings.replicas == 5


def test_server_data_dir_flag_wins_over_env_and_locates_the_file(tmp_path: Path) -> None:
    for name, port in (("by-env", 1111), ("by-flag", 2222)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "server.toml").write_text(f"port = {port}\n")
    env = {"LAKESHORE_DATA_DIR": str(tmp_path / "by-env"), "LAKESHORE_HOST": "::1"}
    settings = load_server_settings({"data_dir": tmp_path / "by-flag"}, env=env)
    assert (settings.data_dir, settings.port, settings.host) == (tmp_path / "by-flag", 2222, "::1")


def test_server_empty_env_variable_counts_as_unset() -> None:
    assert load_server_settings({}, env={"LAKESHORE_NATS_URL": ""}).nats_url is None


def test_server_file_unknown_key_names_key_and_file(tmp_path: Path) -> None:
    path = tmp_path / ".lakeshore" / "server.toml"
    path.parent.mkdir()
    path.write_text("prot = 1\n")
    with pytest.raises(Invalid, match=r"server\.toml.*unknown field `prot`") as info:
        load_server_settings({}, env={})
    assert str(path) in info.value.message


def test_server_file_quotas_table_and_a_misspelt_or_negative_quota(tmp_path: Path) -> None:
    path = tmp_path / ".lakeshore" / "server.toml"
    path.parent.mkdir()
    path.write_text("[quotas]\nqueues_per_namespace = 5\npending_per_org = 0\n")
    settings = load_server_settings({}, env={})
    assert settings.quotas == Quotas(queues_per_namespace=5, pending_per_org=0)
    assert settings.quotas.daemons_per_org == Quotas().daemons_per_org
    path.write_text("[quotas]\nqueus_per_namespace = 5\n")
    with pytest.raises(Invalid, match=r"unknown field `queus_per_namespace` - at `\$\.quotas`"):
        load_server_settings({}, env={})
    path.write_text("[quotas]\ndaemons_per_org = -1\n")
    with pytest.raises(Invalid, match=r">= 0 - at `\$\.quotas\.daemons_per_org`") as info:
        load_server_settings({}, env={})
    assert str(path) in info.value.message


def test_server_file_cannot_set_data_dir(tmp_path: Path) -> None:
    (tmp_path / ".lakeshore").mkdir()
    (tmp_path / ".lakeshore" / "server.toml").write_text('data_dir = "/elsewhere"\n')
    with pytest.raises(Invalid, match="data_dir cannot be set in the file"):
        load_server_settings({}, env={})


def test_server_file_with_bad_toml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / ".lakeshore").mkdir()
    (tmp_path / ".lakeshore" / "server.toml").write_text("port = \n")
    with pytest.raises(Invalid, match=r"server\.toml is not valid TOML"):
        load_server_settings({}, env={})


def test_server_file_types_are_strict(tmp_path: Path) -> None:
    (tmp_path / ".lakeshore").mkdir()
    (tmp_path / ".lakeshore" / "server.toml").write_text('port = "8080"\n')
    with pytest.raises(Invalid, match=r"Expected `int`, got `str` - at `\$\.port`"):
        load_server_settings({}, env={})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LAKESHORE_PORT": "eighty"}, r"invalid LAKESHORE_PORT: .*\$\.port"),
        ({"LAKESHORE_NATS_PORT": "70000"}, r"invalid LAKESHORE_NATS_PORT: .*<= 65535"),
        ({"LAKESHORE_REPLICAS": "0"}, r"invalid LAKESHORE_REPLICAS: .*>= 1"),
    ],
)
def test_server_bad_env_value_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(Invalid, match=message):
        load_server_settings({}, env=env)


def test_server_unknown_flag_is_an_error() -> None:
    with pytest.raises(Invalid, match="command-line flags: .*unknown field `nats`"):
        load_server_settings({"nats": "x"}, env={})


def test_server_lost_after_must_exceed_heartbeat_across_sources(tmp_path: Path) -> None:
    (tmp_path / ".lakeshore").mkdir()
    (tmp_path / ".lakeshore" / "server.toml").write_text("heartbeat_s = 20\n")
    assert load_server_settings({"lost_after_s": 60.0}, env={}).heartbeat_s == 20.0
    with pytest.raises(Invalid, match="lost_after_s .* must be longer than heartbeat_s"):
        load_server_settings({}, env={})


# --- client ------------------------------------------------------------------------------


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def client_sources(tmp_path: Path) -> dict[str, object]:
    """Every client source, each setting ``api`` to its own name."""
    home = tmp_path / "home"
    named = _write(tmp_path / "named.toml", 'api = "named"\n')
    _write(tmp_path / ".lakeshore" / "config.toml", 'api = "local"\n')
    _write(home / ".config" / "lakeshore" / "config.toml", 'api = "user"\n')
    return {
        "flags": {"api": "flags"},
        "env": {"LAKESHORE_API": "env", "LAKESHORE_CONFIG": str(named), "HOME": str(home)},
        "named": named,
        "local": tmp_path / ".lakeshore" / "config.toml",
        "user": home / ".config" / "lakeshore" / "config.toml",
    }


def test_client_defaults_without_any_source(tmp_path: Path) -> None:
    settings = load_client_settings({}, env={"HOME": str(tmp_path)})
    assert settings == ClientSettings()
    assert settings.api == "http://127.0.0.1:8080"
    assert (settings.token, settings.namespace, settings.output) == (None, "default", None)


def test_client_first_source_wins_flags_env_named_local_user(
    client_sources: dict, tmp_path: Path
) -> None:
    flags, env = dict(client_sources["flags"]), dict(client_sources["env"])
    assert load_client_settings(flags, env=env).api == "flags"
    flags["api"] = None
    assert load_client_settings(flags, env=env).api == "env"
    del env["LAKESHORE_API"]
    assert load_client_settings(flags, env=env).api == "named"
    del env["LAKESHORE_CONFIG"]
    assert load_client_settings(flags, env=env).api == "local"
    client_sources["local"].unlink()
    assert load_client_settings(flags, env=env).api == "user"
    client_sources["user"].unlink()
    assert load_client_settings(flags, env=env).api == "http://127.0.0.1:8080"


def test_client_fields_are_resolved_one_by_one(client_sources: dict) -> None:
    _write(client_sources["user"], 'api = "user"\nnamespace = "from-user"\noutput = "yaml"\n')
    _write(client_sources["named"], 'token = "from-named"\n')
    env = {**client_sources["env"], "LAKESHORE_NAMESPACE": "from-env"}
    settings = load_client_settings({"output": "json"}, env=env)
    assert settings == ClientSettings(
        api="env", token="from-named", namespace="from-env", output="json"
    )


def test_client_env_token_and_namespace(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "LAKESHORE_TOKEN": "t0k", "LAKESHORE_NAMESPACE": "bob"}
    settings = load_client_settings({}, env=env)
    assert (settings.token, settings.namespace) == ("t0k", "bob")


def test_client_user_file_follows_xdg_config_home(tmp_path: Path) -> None:
    _write(tmp_path / "xdg" / "lakeshore" / "config.toml", 'namespace = "xdg"\n')
    _write(tmp_path / "home" / ".config" / "lakeshore" / "config.toml", 'namespace = "home"\n')
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert load_client_settings({}, env=env).namespace == "xdg"


def test_client_local_file_is_relative_to_cwd(tmp_path: Path) -> None:
    _write(tmp_path / "proj" / ".lakeshore" / "config.toml", 'namespace = "proj"\n')
    env = {"HOME": str(tmp_path)}
    assert load_client_settings({}, env=env, cwd=tmp_path / "proj").namespace == "proj"


def test_client_api_loses_its_trailing_slash(tmp_path: Path) -> None:
    settings = load_client_settings({"api": "http://h:1/"}, env={"HOME": str(tmp_path)})
    assert settings.api == "http://h:1"


def test_client_empty_token_in_file_means_none(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    write_client_config(path, api="http://h:1", token="", namespace="ns")
    settings = load_client_settings({}, env={"LAKESHORE_CONFIG": str(path), "HOME": "/none"})
    assert settings.token is None


def test_client_missing_lakeshore_config_file_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(Invalid, match="LAKESHORE_CONFIG names .*nope.toml, which does not exist"):
        load_client_settings({}, env={"LAKESHORE_CONFIG": str(missing)})


def test_client_file_may_carry_nats_url(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.toml", 'api = "http://h:1"\nnats_url = "nats://h:4222"\n')
    settings = load_client_settings({}, env={"LAKESHORE_CONFIG": str(path), "HOME": "/none"})
    assert settings.api == "http://h:1"


def test_client_file_unknown_key_names_key_and_file(tmp_path: Path) -> None:
    path = _write(tmp_path / ".lakeshore" / "config.toml", 'namespce = "x"\n')
    with pytest.raises(Invalid, match="unknown field `namespce`") as info:
        load_client_settings({}, env={"HOME": str(tmp_path)})
    assert str(path) in info.value.message


def test_client_file_bad_output_value_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / ".lakeshore" / "config.toml", 'output = "xml"\n')
    with pytest.raises(Invalid, match=r"config\.toml: Invalid enum value 'xml'") as info:
        load_client_settings({}, env={"HOME": str(tmp_path)})
    assert str(path) in info.value.message


def test_client_unknown_flag_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(Invalid, match="command-line flags: .*unknown field `nats_url`"):
        load_client_settings({"nats_url": "nats://x"}, env={"HOME": str(tmp_path)})


# --- written config ----------------------------------------------------------------------


NASTY = 'to"k\\en\n\ttab\x01ctl\x7f – ünï'


def test_written_config_round_trips_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "config.toml"
    write_client_config(
        path, api="http://h:1", token=NASTY, namespace="ns", nats_url="nats://h:4222"
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tomllib.loads(path.read_text()) == {
        "api": "http://h:1",
        "token": NASTY,
        "namespace": "ns",
        "nats_url": "nats://h:4222",
    }
    settings = load_client_settings({}, env={"LAKESHORE_CONFIG": str(path), "HOME": "/none"})
    assert settings == ClientSettings(api="http://h:1", token=NASTY, namespace="ns")


def test_written_config_replaces_an_open_file_and_omits_none(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('api = "old"\n')
    path.chmod(0o644)
    write_client_config(path, api="http://new", token=None, namespace="ns")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_toml(path) == {"api": "http://new", "namespace": "ns"}
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]


def test_read_toml_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(Invalid, match=r"cannot read config file .*absent\.toml"):
        read_toml(tmp_path / "absent.toml")
