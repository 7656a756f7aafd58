"""A real OpenSSH server for the ssh provider's tests, and the daemons it leaves behind.

:class:`Sshd` runs ``/usr/sbin/sshd -D -e`` on a free port of 127.0.0.1 *and* 127.0.0.2
(both loopback on Linux) with a generated ed25519 host key and one authorized client key.
The two addresses stand for two hosts: each login gets its own ``HOME``
(``Match LocalAddress … SetEnv HOME=…``), so ``~/…`` paths differ per "host" as they would
on two machines. The daemons the tests start over SSH are not children of the test
process (they outlive the SSH session on purpose): :func:`kill_daemons` finds them by
their pid files and ends them.
"""

from __future__ import annotations

import getpass
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import asyncssh

SSHD = Path("/usr/sbin/sshd")
#: The two "hosts" (addresses of this machine) the server listens on.
HOSTS = ("127.0.0.1", "127.0.0.2")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


class Sshd:
    """An sshd with its keys and files under ``root``; :meth:`start`, then :meth:`stop`."""

    def __init__(self, root: Path, authorized_keys: Path | None = None) -> None:
        self.root = root
        #: the file of keys that may log in (default: one generated client key's, under root)
        self.authorized_keys = authorized_keys or root / "authorized_keys"
        self.user = getpass.getuser()
        self.port = 0
        #: the client's private key (its public half is the one authorized key)
        self.client_key = root / "client_ed25519"
        #: a known_hosts file with the host key for both addresses on :attr:`port`
        self.known_hosts = root / "known_hosts"
        #: ``HOME`` of a login through each address
        self.homes = {host: root / f"home-{i}" for i, host in enumerate(HOSTS, 1)}
        self._proc: subprocess.Popen[str] | None = None
        self._lines: list[str] = []
        self._listening = threading.Event()
        self._ready = False
        self._drainer: threading.Thread | None = None

    def start(self) -> None:
        """Start sshd and return once it listens on both addresses.

        Raises:
            RuntimeError: sshd exited or did not listen in time, with its output.
        """
        if not SSHD.is_file():
            raise RuntimeError(
                f"{SSHD} is missing: install openssh-server (apt install openssh-server)"
            )
        self.port = _free_port()
        host_key = self.root / "host_ed25519"
        _write_key(host_key, asyncssh.generate_private_key("ssh-ed25519"))
        client = asyncssh.generate_private_key("ssh-ed25519")
        _write_key(self.client_key, client)
        (self.root / "authorized_keys").write_bytes(client.export_public_key())
        public = asyncssh.read_private_key(host_key).export_public_key().decode().strip()
        self.known_hosts.write_text("".join(f"[{h}]:{self.port} {public}\n" for h in HOSTS))
        for home in self.homes.values():
            home.mkdir(mode=0o700, exist_ok=True)
        config = self.root / "sshd_config"
        config.write_text(self._config(host_key))
        if os.geteuid() == 0:
            # sshd's privilege separation directory (Debian's package creates it at boot).
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self._proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._drainer = threading.Thread(target=self._drain, name="sshd-output", daemon=True)
        self._drainer.start()
        if not self._listening.wait(START_TIMEOUT_S) or not self.running() or not self._ready:
            self.stop()
            raise RuntimeError(f"sshd is not listening on {HOSTS}:\n{self.output()}")

    def _config(self, host_key: Path) -> str:
        lines = [
            *(f"ListenAddress {h}:{self.port}" for h in HOSTS),
            f"HostKey {host_key}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            f"PidFile {self.root / 'sshd.pid'}",
            "StrictModes no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "LogLevel INFO",
        ]
        for host, home in self.homes.items():
            lines += [f"Match LocalAddress {host}", f"    SetEnv HOME={home}"]
        return "\n".join(lines) + "\n"

    def _drain(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        listening = 0
        for line in self._proc.stderr:
            self._lines.append(line.rstrip())
            if line.startswith("Server listening on ") and f"port {self.port}" in line:
                listening += 1
                self._ready = listening == len(HOSTS)
                if self._ready:
                    self._listening.set()
        # sshd exited: whoever waits for it to listen stops waiting now.
        self._listening.set()

    def output(self) -> str:
        return "\n".join(self._lines[-50:])

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """Terminate sshd (kill it after :data:`STOP_TIMEOUT_S`)."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(STOP_TIMEOUT_S)
        if self._drainer is not None:
            self._drainer.join(STOP_TIMEOUT_S)
        if self._proc.stderr is not None:
            self._proc.stderr.close()


def runs(pid: int, worker_id: str) -> bool:
    """Whether ``pid`` is a live daemon of ``worker_id`` (a zombie's command line is empty)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return worker_id.encode() in argv


def daemon_pids(dirs: Iterable[Path]) -> dict[str, int]:
    """The live daemons under ``dirs``: worker id → pid, from their pid files."""
    found: dict[str, int] = {}
    for directory in dirs:
        for pid_file in directory.rglob("*.pid"):
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            if runs(pid, pid_file.stem):
                found[pid_file.stem] = pid
    return found


def kill_daemons(dirs: Iterable[Path], timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
    """SIGKILL every live daemon whose pid file is under ``dirs`` and wait until they are
    gone; returns the worker ids killed.

    Raises:
        RuntimeError: one is still running after ``timeout_s``.
    """
    alive = daemon_pids(dirs)
    for pid in alive.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # Not our children: nothing to wait on but the processes' end, seen in /proc.
    deadline = time.monotonic() + timeout_s
    while left := {w: p for w, p in alive.items() if runs(p, w)}:
        if time.monotonic() > deadline:
            raise RuntimeError(f"daemons still running after SIGKILL: {left}")
        time.sleep(0.02)
    return sorted(alive)


def _free_port() -> int:
    """A port free on every address of :data:`HOSTS`."""
    for _ in range(20):
        with socket.socket() as first:
            first.bind((HOSTS[0], 0))
            port = first.getsockname()[1]
            try:
                for host in HOSTS[1:]:
                    with socket.socket() as other:
                        other.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no port free on all of {HOSTS}")


def _write_key(path: Path, key: asyncssh.SSHKey) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.export_private_key())
