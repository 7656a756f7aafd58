"""Every shell block of the README runs, in the order written, on one fresh server.

The README is read into one bash script (``set -eu``, one shell, so ``TOKEN``, ``ID`` and
``patch`` carry from block to block as they do in a reader's terminal) and run in a fresh
project directory whose ``.venv`` is this suite's. A block's failure fails the test with
its README line. What the test does instead of the reader, each named by a marker comment
``<!-- readme-test: … -->`` right above the block, or by the block's own words:

- ``server`` (the Set-up's first block): the install is what this suite runs in; the
  server it ends with is started in the background, as a second terminal would have it,
  on a free API port and ``--nats-port 0`` (every ``127.0.0.1:8080`` in a block becomes
  that port), then waited on until ``/readyz`` answers.
- ``suite``: the test command, which is what runs this test (it must be ``.ci/run``'s).
- ``server stopped``: the server is stopped (SIGTERM, waited on), the block runs, and the
  server is started again on the same data dir.
- ``another machine``: a block for other hosts (a server beyond loopback, a daemon host, a
  control plane cluster); not run here.
- A ``python`` block whose paragraph says "Save this as `NAME`" is written to ``NAME``.

``localhost``'s sshd is the suite's (``tests/providers/ssh/sshd.py``) on a free port: the
README's own commands make the key (in this run's ``HOME``), authorize it and scan the host
key, with ``-p PORT`` given to ``ssh-keyscan`` and ``--config port=PORT`` to each ``ssh``
provider — what port 22 gives a reader.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from providers.ssh.sshd import Sshd, kill_daemons

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
RUN_TIMEOUT_S = 900.0
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 40.0
#: Set in the run's environment: the processes it leaves behind carry it.
MARK = "LAKESHORE_README_RUN"
MARKER = re.compile(r"<!-- readme-test: ([a-z ]+) -->\s*$")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    #: the README line of its opening fence
    line: int
    #: the ``readme-test`` marker above it, if any
    marker: str | None
    #: the prose between the previous block and this one
    before: str


def blocks() -> list[Block]:
    found, end = [], 0
    for m in FENCE.finditer(README):
        before = README[end : m.start()]
        lines = before.rstrip("\n").splitlines()
        marker = MARKER.match(lines[-1]) if lines else None
        found.append(
            Block(
                lang=m.group(1),
                text=m.group(2),
                line=README.count("\n", 0, m.start()) + 1,
                marker=marker.group(1) if marker else None,
                before=before,
            )
        )
        end = m.end()
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(command: str, port: int) -> str:
    """Start the server in the background and wait until it is ready."""
    return f"""\
{command} --port {port} --nats-port 0 >>server.log 2>&1 &
SERVER=$!
echo $SERVER >server.pid
for _ in $(seq {READY_TIMEOUT_S * 10}); do
    curl -sf -o /dev/null http://127.0.0.1:{port}/readyz && break
    kill -0 $SERVER || {{ echo "the server exited:" >&2; tail -30 server.log >&2; exit 1; }}
    sleep 0.1
done
curl -sf -o /dev/null http://127.0.0.1:{port}/readyz
"""


def _stand_in(text: str, api_port: int, ssh_port: int) -> str:
    text = text.replace("127.0.0.1:8080", f"127.0.0.1:{api_port}")
    text = text.replace("ssh-keyscan ", f"ssh-keyscan -p {ssh_port} ")
    out = []
    for line in text.splitlines():
        if " --kind ssh " in line:
            assert "#" not in line, f"no comment on an ssh provider's line: {line}"
            line += f" --config port={ssh_port}"
        out.append(line)
    return "\n".join(out) + "\n"


def script(api_port: int, ssh_port: int) -> str:
    """The README as one bash script; the server command of its Set-up is recorded."""
    parts = [
        "set -eu",
        "trap 'echo \"README.md:$README_LINE: exit $? from: $BASH_COMMAND\" >&2' ERR",
        "README_LINE=0",
    ]
    server = None
    for block in blocks():
        parts.append(f"README_LINE={block.line}")
        parts.append(f"echo '--- README.md:{block.line}' >&2")
        if block.lang == "python":
            saved = re.search(r"Save this as `([\w./-]+)`", block.before)
            if saved:
                parts.append(f"cat >{saved.group(1)} <<'README_PY'\n{block.text}README_PY")
            continue
        if block.lang != "sh":
            continue
        if block.marker == "server":
            *install, server = [c.strip() for c in block.text.strip().split("&&")]
            assert server == ".venv/bin/lakeshore server", block.text
            assert install == [
                "python3 -m venv .venv",
                ".venv/bin/pip install -r requirements/lock.txt",
                ".venv/bin/pip install --no-deps -e .",
            ]
            parts.append(_server(server, api_port))
        elif block.marker == "suite":
            ci = (ROOT / ".ci/run").read_text()
            assert block.text.strip() in ci, "the README's test command is what CI runs"
        elif block.marker == "another machine":
            assert re.search(r"0\.0\.0\.0|example\.com|cp-\d", block.text), block.text
        elif block.marker == "server stopped":
            assert server is not None, "the server is started before it is stopped"
            parts.append('kill -TERM "$SERVER"; wait "$SERVER" || true')
            parts.append(_stand_in(block.text, api_port, ssh_port))
            parts.append(_server(server, api_port))
        else:
            assert block.marker is None, f"README.md:{block.line}: unknown {block.marker!r}"
            parts.append(_stand_in(block.text, api_port, ssh_port))
    assert server is not None, "the README's Set-up starts a server"
    parts.append('kill -TERM "$SERVER"; wait "$SERVER" || true')
    return "\n".join(parts) + "\n"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    return home


@pytest.fixture
def sshd(tmp_path: Path, home: Path) -> Iterator[Sshd]:
    """The suite's sshd, letting in the keys of this run's ``~/.ssh/authorized_keys``."""
    root = tmp_path / "sshd"
    root.mkdir()
    server = Sshd(root, authorized_keys=home / ".ssh" / "authorized_keys")
    try:
        server.start()
    except RuntimeError as e:
        pytest.fail(str(e))
    try:
        yield server
    finally:
        try:
            kill_daemons(server.homes.values())
        finally:
            server.stop()


@pytest.mark.timeout(RUN_TIMEOUT_S + 2 * STOP_TIMEOUT_S)
def test_every_shell_block_of_the_readme_runs_in_order(tmp_path, home, sshd) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    run = tmp_path / "readme.sh"
    run.write_text(script(_free_port(), sshd.port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
    env.update(
        HOME=str(home),
        PATH=f"{project / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        **{MARK: str(tmp_path)},
    )
    try:
        done = subprocess.run(
            ["bash", str(run)],
            cwd=project,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    finally:
        _end_what_it_left(project, str(tmp_path))
    tail = "\n".join((done.stdout + "\n" + done.stderr).splitlines()[-80:])
    assert done.returncode == 0, f"{run} failed:\n{tail}"
    out, err = done.stdout, done.stderr
    # What the README says its examples print.
    assert "hello" in out and "42" in out and "[0, 2, 4, 6, 8]" in out, tail
    refused = "--namespace default --provider my-laptop --name laptop --queue cpu-prep`"
    assert refused in err and "exit 1" in out, tail
    assert "GPUs 0,1" in out and "GPUs []" in out, tail  # each run its own devices
    assert "warning: no_daemon_fits: needs 4 GPUs, 1 CPU; the largest member" in err, tail


def _end_what_it_left(project: Path, mark: str) -> None:
    """Stop the server if the run did not, then every process carrying the run's mark."""
    pid_file = project / "server.pid"
    if pid_file.exists():
        _end(int(pid_file.read_text()), signal.SIGTERM, STOP_TIMEOUT_S)
    for pid in _marked(mark):
        _end(pid, signal.SIGKILL, STOP_TIMEOUT_S)


def _marked(mark: str) -> list[int]:
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _end(pid: int, sig: signal.Signals, timeout_s: float) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    # Not always our child: its end is seen in /proc (a zombie's cmdline is empty).
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False
