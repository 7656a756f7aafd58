"""The POSIX sh scripts the ``ssh`` backend runs on its hosts.

Each script is one ``sh -c '…'`` command; every value in it is shell-quoted. Nothing
secret is ever in a script: a daemon's credential (and its NATS CA) reach the host on the
command's stdin (:func:`start_input`) and only the daemon's environment holds them.

On a host, the daemons of namespace ``ns`` keep their files in ``<log_dir>/<ns>/`` (a 0700
directory): ``<name>.log`` (0600, appended) and ``<worker-id>.pid``. A pid file counts only
while its process's command line is ``… -m lakeshore daemon run … --id <worker-id> …`` of
the same provider, which also guards every signal against pid reuse.
"""

from __future__ import annotations

import base64
import math
import shlex
from collections.abc import Sequence

from lakeshore.model import DaemonAccess, Worker
from lakeshore.providers.local import CA_ENV, CREDENTIAL_ENV, daemon_argv
from lakeshore.providers.ssh_config import SshConfig

#: The exit status of :func:`count` when the interpreter cannot run lakeshore.
NO_LAKESHORE_EXIT = 3
#: Seconds between two checks of a stopping daemon.
_POLL_S = 0.1

# ``daemon PID WORKER_ID``: whether PID runs a lakeshore daemon of that worker, whichever
# provider started it (a zombie has an empty command line: it does not run);
# ``running PID WORKER_ID``: and this provider did. Two providers may share a host and a
# log dir: a pid file of another provider's live daemon is neither counted nor removed.
_RUNNING = """\
daemon() {
  case $1 in ''|*[!0-9]*) return 1;; esac
  if [ -r "/proc/$1/cmdline" ]; then a=$(tr '\\000' ' ' < "/proc/$1/cmdline")
  else a=$(ps -ww -o args= -p "$1" 2>/dev/null) || return 1; fi
  case " $a " in *" -m lakeshore daemon run "*) ;; *) return 1;; esac
  case " $a " in *" --id $2 "*) return 0;; esac
  return 1
}
running() {
  daemon "$1" "$2" || return 1
  case " $a " in *" --provider $provider "*) return 0;; esac
  return 1
}
"""


def shell_path(path: str) -> str:
    """``path`` as one shell word, ``~`` and ``~/…`` meaning the login's home."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def command(script: str) -> str:
    """The SSH command that runs ``script`` with ``sh`` whatever the login shell."""
    return "exec sh -c " + shlex.quote(script)


def _prelude(cfg: SshConfig, namespace: str, provider: str) -> str:
    lines = [
        "umask 077",
        f"d={shell_path(cfg.log_dir)}/{shlex.quote(namespace)}",
        f"py={shell_path(cfg.python)}",
        f"provider={shlex.quote(provider)}",
    ]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(cfg.env.items())]
    return "\n".join(lines) + "\n" + _RUNNING


def count(cfg: SshConfig, namespace: str, provider: str) -> str:
    """Print how many daemons of the provider run on the host (removing the pid files of
    ended daemons),
    after checking the interpreter runs lakeshore (else exit 3 with why on stderr)."""
    return _prelude(cfg, namespace, provider) + (
        "if ! command -v \"$py\" >/dev/null 2>&1; then\n"
        "  echo \"$py: not found (set the provider's python: to the interpreter's path)\" >&2\n"
        f"  exit {NO_LAKESHORE_EXIT}\n"
        "fi\n"
        "if ! \"$py\" -c 'import importlib.util as u, sys; "
        "sys.exit(u.find_spec(\"lakeshore\") is None)' 2>/dev/null; then\n"
        "  echo \"$py cannot import lakeshore (install it there, or set the provider's "
        "python: to an interpreter that has it)\" >&2\n"
        f"  exit {NO_LAKESHORE_EXIT}\n"
        "fi\n"
        'mkdir -p "$d" || exit 1\n'
        "n=0\n"
        'for f in "$d"/*.pid; do\n'
        '  [ -f "$f" ] || continue\n'
        '  w=${f##*/}; w=${w%.pid}\n'
        '  p=$(cat "$f" 2>/dev/null)\n'
        '  if running "$p" "$w"; then n=$((n + 1)); elif ! daemon "$p" "$w"; then rm -f "$f"; fi\n'
        "done\n"
        'echo "$n"\n'
    )  # fmt: skip


def start(
    cfg: SshConfig, worker: Worker, nats_url: str, flags: Sequence[str]
) -> tuple[str, list[str]]:
    """The script that starts ``worker``'s daemon in its own session, detached from the SSH
    session (``nohup setsid``), and prints its pid; and the daemon's command line.

    The script reads the credential (line 1) and the base64 CA PEM (line 2, may be empty)
    from stdin: feed it :func:`start_input`.
    """
    argv = daemon_argv(("python", "-m", "lakeshore", "daemon", "run"), worker, nats_url, flags)
    words = " ".join(['"$py"', *(shlex.quote(a) for a in argv[1:])])
    shown = " ".join([cfg.python, *argv[1:]])
    log = f'"$d"/{shlex.quote(worker.name + ".log")}'
    pid_file = f'"$d"/{shlex.quote(worker.id + ".pid")}'
    decode = "import base64, sys; sys.stdout.write(base64.b64decode(sys.stdin.read()).decode())"
    script = _prelude(cfg, worker.namespace, worker.provider) + (
        "IFS= read -r c || c=\n"
        "IFS= read -r ca || ca=\n"
        'if [ -z "$c" ]; then echo "no credential on stdin" >&2; exit 1; fi\n'
        f"{CREDENTIAL_ENV}=$c; export {CREDENTIAL_ENV}; unset c\n"
        f"unset {CA_ENV}\n"
        'if [ -n "$ca" ]; then\n'
        f"  {CA_ENV}=$(printf '%s' \"$ca\" | \"$py\" -c {shlex.quote(decode)}) || exit 1\n"
        f"  export {CA_ENV}\n"
        "fi\n"
        'mkdir -p "$d" || exit 1\n'
        f"log={log}\n"
        ': >> "$log" && chmod 600 "$log" || exit 1\n'
        "printf '%s\\n' \"--- $(date -u +%Y-%m-%dT%H:%M:%SZ) launched: \""
        f"{shlex.quote(shown)} >> \"$log\"\n"
        "s=; if command -v setsid >/dev/null 2>&1; then s=setsid; fi\n"
        f'nohup $s {words} >> "$log" 2>&1 < /dev/null &\n'
        "pid=$!\n"
        f'echo "$pid" > {pid_file}\n'
        'echo "$pid"\n'
    )  # fmt: skip
    return script, argv


def start_input(access: DaemonAccess) -> str:
    """The stdin of :func:`start`'s script: the credential, then the base64 CA PEM."""
    if not access.credential or "\n" in access.credential:
        raise ValueError("a daemon credential is one non-empty line")
    ca = "" if access.ca_pem is None else base64.b64encode(access.ca_pem.encode()).decode()
    return f"{access.credential}\n{ca}\n"


def terminate(cfg: SshConfig, worker: Worker, pid: str) -> str:
    """SIGTERM the daemon if ``pid`` still runs it: prints ``signalled``, else ``gone``
    (and removes its pid file)."""
    return _prelude(cfg, worker.namespace, worker.provider) + (
        f"pid={shlex.quote(pid)}; w={shlex.quote(worker.id)}\n"
        'if running "$pid" "$w"; then kill -TERM "$pid" && echo signalled && exit 0; fi\n'
        'rm -f "$d/$w.pid"\n'
        "echo gone\n"
    )


def await_end(cfg: SshConfig, worker: Worker, pid: str, timeout_s: float) -> str:
    """Wait up to ``timeout_s`` for the daemon to end (``ended``), else SIGKILL it
    (``killed``); either way its pid file goes."""
    polls = max(1, math.ceil(timeout_s / _POLL_S))
    return _prelude(cfg, worker.namespace, worker.provider) + (
        f"pid={shlex.quote(pid)}; w={shlex.quote(worker.id)}; i=0\n"
        'while running "$pid" "$w"; do\n'
        f"  if [ $i -ge {polls} ]; then\n"
        '    kill -KILL "$pid" 2>/dev/null; rm -f "$d/$w.pid"; echo killed; exit 0\n'
        "  fi\n"
        f"  sleep {_POLL_S:g}; i=$((i + 1))\n"
        "done\n"
        'rm -f "$d/$w.pid"\n'
        "echo ended\n"
    )
