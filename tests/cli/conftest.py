"""The CLI's tests run it as a user's shell would, against a real control plane, with no
setting leaking in from the developer's environment or config files."""

from __future__ import annotations

import pytest
from clirunner import Invoke, cli_for


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No settings leak in from the developer's environment or config files."""
    for var in ("LAKESHORE_API", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE", "LAKESHORE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def cli(control_plane, isolated) -> Invoke:
    """``await cli("queues", "ls")``: the CLI with the control plane's URL and admin token
    in the environment (:func:`clirunner.cli_for`)."""
    return cli_for(control_plane)
