"""The data dir is the server user's alone (spec/security.md, requirement 6): the dir 0700,
the files under it 0600, whatever the umask of the process that starts the control plane."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from lakeshore.datadir import secure_data_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def loose(root: Path) -> list[str]:
    """Paths under ``root`` (not symbolic links) that group or others may use."""
    return [str(p) for p in root.rglob("*") if not p.is_symlink() and mode(p) & 0o077]


def test_a_missing_data_dir_is_created_private(tmp_path: Path):
    data_dir = tmp_path / "new" / "data"
    assert secure_data_dir(data_dir) == data_dir
    assert data_dir.is_dir() and mode(data_dir) == 0o700


def test_an_open_data_dir_and_what_it_holds_become_the_owners_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    data_dir = tmp_path / "data"
    outside = tmp_path / "outside.txt"
    outside.write_text("not the server's")
    outside.chmod(0o644)
    modes = {
        "lakeshore.duckdb": 0o644,
        "lakeshore.duckdb.wal": 0o664,
        "nats/jetstream/LS_EVENTS/msgs/1.blk": 0o640,
        "daemons/w-1.log": 0o600,
        "bin/hook": 0o755,
        "read-only": 0o444,
    }
    for name, m in modes.items():
        path = data_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        path.chmod(m)
    for d in (data_dir / "nats", data_dir / "nats/jetstream", data_dir):
        d.chmod(0o755)
    (data_dir / "link").symlink_to(outside)

    with caplog.at_level(logging.WARNING, logger="lakeshore.datadir"):
        secure_data_dir(data_dir)

    assert mode(data_dir) == 0o700 and not loose(data_dir)
    assert {name: mode(data_dir / name) for name in modes} == {
        "lakeshore.duckdb": 0o600,
        "lakeshore.duckdb.wal": 0o600,
        "nats/jetstream/LS_EVENTS/msgs/1.blk": 0o600,
        "daemons/w-1.log": 0o600,
        "bin/hook": 0o700,
        "read-only": 0o400,
    }
    assert mode(data_dir / "nats") == 0o700 and mode(data_dir / "bin") == 0o700
    assert mode(outside) == 0o644  # a link is not followed
    assert f"data dir {data_dir} had mode 755; now 700" in caplog.text
    assert "were open to group or others; now the owner's only" in caplog.text


def test_a_private_data_dir_is_left_as_it_is_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    data_dir = secure_data_dir(tmp_path / "data")
    (data_dir / "config.toml").write_text("x")
    (data_dir / "config.toml").chmod(0o600)
    (data_dir / "read-only").write_text("x")
    (data_dir / "read-only").chmod(0o400)
    with caplog.at_level(logging.WARNING, logger="lakeshore.datadir"):
        secure_data_dir(data_dir)
    assert not caplog.records
    assert mode(data_dir / "config.toml") == 0o600 and mode(data_dir / "read-only") == 0o400


async def test_a_control_plane_started_without_the_cli_keeps_its_data_dir_private(
    plane_factory, tmp_path: Path
):
    data_dir = tmp_path / "embedded"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    stale = data_dir / "daemons" / "old.log"
    stale.parent.mkdir()
    stale.write_text("output of an earlier run")
    stale.chmod(0o644)
    server = await plane_factory(data_dir=data_dir)
    assert mode(data_dir) == 0o700
    assert mode(stale) == 0o600 and mode(stale.parent) & 0o077 == 0
    await server.stop()
    (data_dir / "lakeshore.duckdb").chmod(0o644)  # as a plane run with a loose umask leaves it
    await plane_factory(data_dir=data_dir)
    assert mode(data_dir) == 0o700 and mode(data_dir / "lakeshore.duckdb") == 0o600
