"""The ssh provider's tests run against a real sshd (``sshd.py``) started once per session.

A machine without ``/usr/sbin/sshd`` fails them (install openssh-server), never skips.
Every test's daemons are killed at its end: they outlive SSH sessions and control planes
on purpose, so nothing else would end them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from ssh_fleet import Fleet
from sshd import Sshd, kill_daemons


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """sshd on 127.0.0.1 and 127.0.0.2 (two "hosts", each login with its own HOME)."""
    server = Sshd(tmp_path_factory.mktemp("sshd"))
    try:
        server.start()
    except RuntimeError as e:
        pytest.fail(str(e))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def fleet(plane_factory, sshd: Sshd, tmp_path) -> AsyncIterator[Fleet]:
    """A started control plane (0.2 s ticks and heartbeats, lost after 2 s) and helpers
    to add ssh providers on ``sshd``; the test's daemons are killed at teardown."""
    fleet = Fleet(plane_factory, sshd, tmp_path)
    try:
        await fleet.start()
        yield fleet
    finally:
        fleet.release()
        try:
            kill_daemons(fleet.daemon_dirs)
        finally:
            await fleet.close()
