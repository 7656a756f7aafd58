"""The config of a ``slurm`` provider row, and the ``sbatch`` command line it makes.

Every setting is optional: a provider row with ``config: {}`` submits to the cluster's
default partition with its default limits, runs the daemons with the control plane's own
interpreter (a cluster that shares the control plane's file system) and tells them the
control plane's NATS URL.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from lakeshore.errors import Invalid
from lakeshore.model import Worker

#: ``minutes``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS`` (sbatch --time).
_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|unlimited|infinite", re.IGNORECASE)
#: megabytes, or a number with a K/M/G/T suffix (sbatch --mem).
_MEM = re.compile(r"\d+[KMGT]?", re.IGNORECASE)
#: sbatch flags the provider sets itself: an ``extra_args`` entry must not override them.
_OWN_LONG = ("wrap", "parsable", "job-name", "output", "export", "array", "test-only")
_OWN_SHORT = ("-J", "-o", "-a")


class SlurmConfig(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A ``slurm`` provider row's ``config`` (see ``docs/providers.md``)."""

    #: ``--partition``; ``None``: the cluster's default partition
    partition: str | None = None
    #: ``--gres``, e.g. ``"gpu:1"``
    gres: str | None = None
    #: ``--time``, the job's (hence the daemon's) time limit, e.g. ``"04:00:00"``
    time: str | None = None
    #: ``--account``
    account: str | None = None
    #: ``--qos``
    qos: str | None = None
    #: ``--cpus-per-task``
    cpus_per_task: Annotated[int, Meta(ge=1)] | None = None
    #: ``--mem``, e.g. ``"16G"``, or a number of megabytes
    mem: str | Annotated[int, Meta(ge=0)] | None = None
    #: more sbatch flags, passed as given after the ones above, e.g. ``["--constraint=a100"]``
    extra_args: list[str] = []
    #: the interpreter that runs ``-m lakeshore daemon run`` on the nodes; ``None``: the
    #: control plane's own (``sys.executable``: a shared file system)
    python: str | None = None
    #: where the jobs' output goes (``<log_dir>/<name>-<job id>.log``, on the nodes);
    #: ``None``: the control plane's ``<data-dir>/daemons/<namespace>``
    log_dir: str | None = None
    #: ``--chdir``, the jobs' working directory; ``None``: the control plane's
    chdir: str | None = None
    #: the ``slurm.conf`` sbatch, squeue and scancel read (``SLURM_CONF``); ``None``: theirs
    slurm_conf: str | None = None
    #: the NATS URL(s) the daemons are told, when the nodes reach NATS by another address
    #: than the control plane advertises
    nats_url: str | None = None
    #: seconds between two ``squeue`` calls that look for ended jobs
    poll_s: Annotated[float, Meta(gt=0)] = 5.0


#: The settings a ``slurm`` provider reads, for error messages.
KNOWN = ", ".join(SlurmConfig.__struct_fields__)


def parse_config(config: dict[str, Any]) -> SlurmConfig:
    """Decode and check a provider row's ``config``.

    Raises:
        Invalid: an unknown setting, a value of the wrong type or form; the message names
            the setting (``$.time``) and the form expected.
    """
    if isinstance(config.get("time"), int | float):
        raise Invalid(
            'slurm provider config: time must be a string such as "04:00:00" or "90" '
            "(minutes); in YAML quote it — an unquoted 04:00:00 is read as a number - at `$.time`"
        )
    try:
        # Lax: ``--config cpus_per_task=8`` (the CLI) sends the number as a string.
        parsed = msgspec.convert(config, SlurmConfig, strict=False)
    except msgspec.ValidationError as e:
        raise Invalid(f"slurm provider config: {e}; the settings are: {KNOWN}") from None
    _check(parsed)
    return parsed


def _check(c: SlurmConfig) -> None:
    for key in ("partition", "gres", "account", "qos"):
        value = getattr(c, key)
        if value is not None and (not value or value.startswith("-") or _spaced(value)):
            _refuse(key, value, "a non-empty value without spaces")
    if c.time is not None and not _TIME.fullmatch(c.time):
        _refuse("time", c.time, 'minutes, "HH:MM:SS" or "D-HH:MM:SS" (sbatch --time)')
    if isinstance(c.mem, str) and not _MEM.fullmatch(c.mem):
        _refuse("mem", c.mem, 'megabytes, or a size such as "16G" (sbatch --mem)')
    for key in ("log_dir", "chdir", "slurm_conf"):
        value = getattr(c, key)
        if value is not None and not PurePosixPath(value).is_absolute():
            _refuse(key, value, "an absolute path")
    if c.python is not None and (not c.python.strip() or "\0" in c.python):
        _refuse("python", c.python, 'a path or command, e.g. "/opt/venv/bin/python"')
    if c.nats_url is not None and not all(
        "://" in url and not _spaced(url) for url in c.nats_url.split(",")
    ):
        _refuse("nats_url", c.nats_url, '"nats://HOST:PORT" or "tls://HOST:PORT", comma-separated')
    if c.extra_args and not c.extra_args[0].startswith("-"):
        _refuse("extra_args", c.extra_args[0], "sbatch flags, starting with a flag")
    for arg in c.extra_args:
        if _owned(arg):
            raise Invalid(
                f"slurm provider config: extra_args may not contain {arg!r}: the provider sets "
                "--job-name, --output, --export, --parsable and --wrap itself and starts one "
                "daemon per job (no --array); use log_dir for where the output goes - at "
                "`$.extra_args`"
            )


def _owned(arg: str) -> bool:
    if arg.startswith("--"):
        name = arg[2:].split("=", 1)[0]
        # sbatch (getopt_long) takes any unambiguous prefix of a long flag.
        return bool(name) and any(own.startswith(name) for own in _OWN_LONG)
    return arg.startswith("-") and arg[:2] in _OWN_SHORT


def _spaced(value: str) -> bool:
    return any(ch.isspace() or ch == "\0" for ch in value)


def _refuse(key: str, value: str, expected: str) -> None:
    raise Invalid(f"slurm provider config: {key} must be {expected}, not {value!r} - at `$.{key}`")


def sbatch_argv(
    config: SlurmConfig, worker: Worker, log_dir: Path, command: Sequence[str]
) -> list[str]:
    """``sbatch`` submitting one job that ``exec``\\ s ``command`` (the daemon's argv).

    The job's environment is sbatch's (``--export=ALL``): that is how the daemon gets its
    credential, which is never on a command line.
    """
    # ``%`` starts a filename pattern of --output (``%j``: the job id).
    output = f"{str(log_dir).replace('%', '%%')}/{worker.name}-%j.log"
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name=lakeshore-{worker.name}",
        f"--output={output}",
        "--export=ALL",
    ]
    flags = {
        "partition": config.partition,
        "gres": config.gres,
        "time": config.time,
        "account": config.account,
        "qos": config.qos,
        "cpus-per-task": config.cpus_per_task,
        "mem": config.mem,
        "chdir": config.chdir,
    }
    argv += [f"--{flag}={value}" for flag, value in flags.items() if value is not None]
    argv += config.extra_args
    argv += ["--wrap", f"exec {shlex.join(command)}"]
    return argv


def command_env(config: SlurmConfig, base: dict[str, str] | None = None) -> dict[str, str] | None:
    """The environment of a Slurm command for this provider: ``base`` (else the control
    plane's), with ``SLURM_CONF`` when the config names one; ``None``: the control plane's
    own, unchanged."""
    if config.slurm_conf is None:
        return base
    return {**(os.environ if base is None else base), "SLURM_CONF": config.slurm_conf}
