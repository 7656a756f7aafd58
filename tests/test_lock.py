"""The lock is whole: the suite runs on exactly what ``requirements/`` pins.

``scripts/lock`` writes both files from ``pyproject.toml``; a dependency added there, or a
package installed by hand into the suite's venv, fails here until the lock is regenerated.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEV_LOCK = ROOT / "requirements" / "lock-dev.txt"
SERVER_LOCK = ROOT / "requirements" / "lock.txt"
FIX = "run scripts/lock, reinstall from requirements/lock-dev.txt and commit the lock"
# Not installed from the lock: the venv's own installer (pip; setuptools too on Python 3.11,
# which `python3 -m venv` seeds) and Lakeshore itself, installed from the checkout.
NOT_LOCKED = {"pip", "setuptools", "lakeshore"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, str]:
    return {canonical(name): version for name, version in PIN.findall(lock.read_text())}


def test_every_installed_distribution_is_locked_at_its_version() -> None:
    locked = pins(DEV_LOCK)
    wrong = []
    for dist in importlib.metadata.distributions():
        name = canonical(dist.metadata["Name"])
        if name in NOT_LOCKED:
            continue
        if name not in locked:
            wrong.append(f"{name} {dist.version} is installed but not in the lock")
        elif locked[name] != dist.version:
            wrong.append(f"{name} {dist.version} is installed; the lock says {locked[name]}")
    assert not wrong, "; ".join(sorted(wrong)) + f": {FIX}"


def test_every_dependency_of_pyproject_is_locked() -> None:
    locked = pins(DEV_LOCK)
    requirements = importlib.metadata.requires("lakeshore") or []
    names = {canonical(re.match(r"[A-Za-z0-9._-]+", req).group()) for req in requirements}
    missing = sorted(names - set(locked))
    assert not missing, f"in pyproject.toml but not in the lock: {', '.join(missing)}: {FIX}"


def test_the_servers_lock_pins_the_suites_versions() -> None:
    server, dev = pins(SERVER_LOCK), pins(DEV_LOCK)
    assert server, "requirements/lock.txt pins nothing"
    differ = {name: (v, dev.get(name)) for name, v in server.items() if dev.get(name) != v}
    assert not differ, f"requirements/lock.txt and lock-dev.txt disagree on {differ}: {FIX}"
