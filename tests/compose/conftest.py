"""Fixtures of the compose tests: a project directory holding ``lakeshore.yaml``, the CLI
against the test's control plane, and its live state (helpers in ``composing.py``)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from composing import Invoke, Live, cli_for


@pytest.fixture
def project_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty directory ``demo``, the working directory; no settings leak in."""
    for var in ("LAKESHORE_API", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE", "LAKESHORE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    directory = tmp_path / "demo"
    directory.mkdir()
    monkeypatch.chdir(directory)
    return directory


@pytest.fixture
def compose_file(project_dir: Path) -> Callable[..., Path]:
    """``compose_file(yaml)``: (over)write ``./lakeshore.yaml`` (dedented)."""

    def write(text: str, name: str = "lakeshore.yaml") -> Path:
        path = project_dir / name
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return write


@pytest.fixture
def cli(control_plane, project_dir) -> Invoke:
    """The CLI against the test's control plane, run in ``project_dir``."""
    return cli_for(control_plane)


@pytest.fixture
def live(control_plane) -> Live:
    return Live(control_plane)
