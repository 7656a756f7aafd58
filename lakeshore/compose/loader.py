"""Reading and checking ``lakeshore.yaml`` before anything is sent.

:func:`load` reports every problem it finds at once, each as ``FILE:LINE:COL: what is
wrong and how to fix it``: YAML errors, unknown keys, values of the wrong type or range
(msgspec, against :mod:`lakeshore.compose.spec`), names that break the name rules
(:func:`lakeshore.model.validate_name`) and elasticity objects the server would refuse
(:func:`lakeshore.elasticity.build`, the server's own check).

Sections are checked entry by entry, so that a problem in one queue does not hide those
in the next, and so that msgspec's paths (which write a dict key as ``[...]``) are always
relative to a known entry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path as FsPath
from typing import Any

import msgspec
from msgspec import Struct

from lakeshore.code import snapshot
from lakeshore.compose.marks import Marks, Path, Problem, YamlProblems, read
from lakeshore.compose.messages import dotted, explain, fields_of, kind_of, unknown_key
from lakeshore.compose.spec import (
    RESERVED_LABELS,
    ComposeFile,
    DaemonSpec,
    NamespaceSpec,
    ProviderSpec,
    QueueSpec,
    daemon_stem,
    desired_elasticity,
)
from lakeshore.errors import Invalid, InvalidName
from lakeshore.model import (
    BUILTIN_PROVIDER,
    DEFAULT_QUEUE,
    NAME_MAX,
    ProviderKind,
    check_resources,
    validate_name,
)
from lakeshore.providers.slurm_config import parse_config as parse_slurm_config
from lakeshore.providers.ssh_config import parse_config as parse_ssh_config

#: Each section of a namespace, what its entries are, and what an entry is called.
SECTIONS: dict[str, tuple[type[Struct], str]] = {
    "providers": (ProviderSpec, "provider"),
    "queues": (QueueSpec, "queue"),
    "daemons": (DaemonSpec, "daemon group"),
}
#: The server's own check of a provider's config, per kind that has one.
_CONFIG_CHECKS: dict[ProviderKind, Callable[[dict[str, Any]], object]] = {
    ProviderKind.SSH: parse_ssh_config,
    ProviderKind.SLURM: parse_slurm_config,
}
_TOP_ONLY = ("project", "namespace", "namespaces")


class ComposeFileInvalid(Invalid):
    """A compose file with problems; nothing was sent. Its message has one line per
    problem, ``FILE:LINE:COL: …``, in the file's order."""

    code = "invalid_compose_file"

    def __init__(self, file: str, problems: list[Problem]) -> None:
        self.file = file
        self.problems = sorted(problems)
        super().__init__(
            "\n".join(f"{file}:{p.mark.line}:{p.mark.column}: {p.message}" for p in self.problems)
        )


class CodeDir(Struct, frozen=True, kw_only=True):
    """A ``code:`` directory of the file and its snapshot's digest."""

    path: str
    digest: str


class Declared(Struct, frozen=True, kw_only=True):
    """A checked compose file: its project and what each namespace should have."""

    #: the file as the user named it (for messages)
    file: str
    project: str
    namespaces: dict[str, NamespaceSpec]
    #: each queue's ``code`` directory (as the file gives it) resolved against the file's
    #: directory, and the digest of its snapshot now
    code: dict[str, CodeDir] = {}


def load(
    path: str,
    *,
    project: str | None = None,
    namespace: str = "default",
    env: Mapping[str, str] | None = None,
) -> Declared:
    """Read, check and resolve a compose file.

    Args:
        path: the file, as the user gave it (messages name it so).
        env: the variables ``${NAME}`` in its values is replaced from (``None``: none).
        project: the project's name (``-p``); default the file's ``project``, else its
            directory's name made a valid name.
        namespace: the namespace of the file's top sections when it names none.

    Raises:
        ComposeFileInvalid: every problem found, with its line and column.
        Invalid: the file cannot be read, or no project name can be made of its directory.
    """
    try:
        text = FsPath(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise Invalid(f"cannot read compose file {path}: {e}; give another with -f") from None
    spec = parse(text, path, env)
    name = project or spec.project or project_from_dir(FsPath(path))
    namespaces = spec.by_namespace(namespace)
    return Declared(
        file=path, project=name, namespaces=namespaces, code=_code_dirs(path, namespaces)
    )


def _code_dirs(path: str, namespaces: dict[str, NamespaceSpec]) -> dict[str, CodeDir]:
    """Every queue's ``code:`` directory, packed (its digest).

    Raises:
        Invalid: one is not a directory, cannot be read, or is over the default bounds.
    """
    here = FsPath(path).resolve().parent
    found: dict[str, CodeDir] = {}
    for spec in namespaces.values():
        for queue, q in spec.queues.items():
            if q.code is None or q.code in found:
                continue
            directory = here / q.code
            try:
                digest = snapshot.pack(directory).digest
            except Invalid as e:
                raise Invalid(f"{path}: queue {queue}: {e.message}") from None
            found[q.code] = CodeDir(path=str(directory), digest=digest)
    return found


def parse(
    text: str, file: str = "lakeshore.yaml", env: Mapping[str, str] | None = None
) -> ComposeFile:
    """Check a compose file's text (``${NAME}`` replaced from ``env``, if given).

    Raises:
        ComposeFileInvalid: every problem found, naming ``file``.
    """
    try:
        data, marks, problems = read(text, env)
    except YamlProblems as e:
        raise ComposeFileInvalid(file, e.problems) from None
    checker = _Checker(marks)
    spec = checker.file(data)
    if problems or checker.problems or spec is None:
        raise ComposeFileInvalid(file, [*problems, *checker.problems])
    return spec


def project_from_dir(path: FsPath) -> str:
    """The project name made of the directory holding ``path``: lowercased, every run of
    other characters a ``-``, at most 63 characters.

    Raises:
        Invalid: nothing usable is left (then the file needs ``project:`` or ``-p``).
    """
    directory = path.resolve().parent.name
    name = re.sub(r"[^a-z0-9]+", "-", directory.lower()).strip("-")[:NAME_MAX].strip("-")
    if not name:
        raise Invalid(
            f"cannot make a project name of directory {directory!r}: set `project:` in the "
            "file or give -p NAME"
        )
    return name


class _Checker:
    """Walks the file's values, collecting :class:`Problem` s against its marks."""

    def __init__(self, marks: Marks) -> None:
        self.marks = marks
        self.problems: list[Problem] = []

    def problem(self, path: Path, message: str, *, key: bool = False) -> None:
        mark = self.marks.key(path) if key else self.marks.value(path)
        self.problems.append(Problem(mark, message))

    # ---- the file ----------------------------------------------------------------------

    def file(self, data: Any) -> ComposeFile | None:
        if not isinstance(data, dict):
            got = "nothing" if data is None else kind_of(data)
            self.problem(
                (),
                f"the file must be a mapping of {', '.join(fields_of(ComposeFile))}; got {got}",
            )
            return None
        self.unknown(data, (), fields_of(ComposeFile), "the file")
        for key in ("project", "namespace"):
            if key in data:
                self.name(key, data[key], (key,))
        if "namespaces" in data:
            clash = [k for k in data if k in ("namespace", *SECTIONS)]
            if clash:
                self.problem(
                    (clash[0],),
                    f"{', '.join(clash)} cannot be given with `namespaces`: move the sections "
                    "under their namespace in `namespaces`, or declare one namespace with "
                    "`namespace:` and no `namespaces`",
                    key=True,
                )
            self.namespaces(data["namespaces"])
        else:
            self.namespace_body({k: v for k, v in data.items() if k not in _TOP_ONLY}, ())
        if self.problems:
            return None
        return self.convert(data, ComposeFile, ())

    def namespaces(self, value: Any) -> None:
        path: Path = ("namespaces",)
        if not isinstance(value, dict) or not value:
            self.problem(path, "namespaces must map each namespace's name to its sections")
            return
        for ns, body in value.items():
            self.key_name("namespace", ns, (*path, ns))
            if not isinstance(body, dict):
                self.problem(
                    (*path, ns),
                    f"namespace {ns} must be a mapping of {', '.join(SECTIONS)}; "
                    f"got {kind_of(body)}",
                )
                continue
            self.unknown(body, (*path, ns), tuple(SECTIONS), f"namespace {ns}")
            self.namespace_body(body, (*path, ns))

    def namespace_body(self, body: dict[str, Any], path: Path) -> None:
        entries: dict[str, dict[str, Any]] = {}
        for section, (struct, what) in SECTIONS.items():
            if section not in body:
                continue
            value = body[section]
            if not isinstance(value, dict):
                self.problem(
                    (*path, section),
                    f"{section} must map each {what}'s name to its settings; got {kind_of(value)}"
                    + (" (write {} for none)" if value is None else ""),
                )
                continue
            entries[section] = {}
            for key, entry in value.items():
                where = (*path, section, key)
                self.key_name(what.split()[0], key, where)
                spec = self.struct(entry, struct, where, f"{what} {key}")
                if spec is not None:
                    entries[section][key] = spec
        self.providers(entries.get("providers", {}), (*path, "providers"))
        self.queues(entries.get("queues", {}), (*path, "queues"))
        self.daemons(entries.get("daemons", {}), (*path, "daemons"))

    # ---- the rules beyond types --------------------------------------------------------

    def providers(self, specs: dict[str, ProviderSpec], path: Path) -> None:
        for name, spec in specs.items():
            if name == BUILTIN_PROVIDER:
                self.problem(
                    (*path, name),
                    f"provider {name!r} is built into every namespace and cannot be declared: "
                    "remove it (daemons use it by default)",
                    key=True,
                )
            self.labels(spec.labels, (*path, name, "labels"), f"provider {name}")
            check = _CONFIG_CHECKS.get(spec.kind)
            try:
                if check is not None:
                    check(spec.config)
            except Invalid as e:
                self.problem((*path, name, "config"), f"provider {name}: {e.message}")

    def queues(self, specs: dict[str, QueueSpec], path: Path) -> None:
        for name, spec in specs.items():
            if name == DEFAULT_QUEUE:
                self.problem(
                    (*path, name),
                    "the default queue exists in every namespace and cannot be declared: "
                    "remove it, or declare a queue of another name",
                    key=True,
                )
            self.labels(spec.labels, (*path, name, "labels"), f"queue {name}")
            where = (*path, name, "elasticity")
            try:
                desired_elasticity(spec)
            except Invalid as e:
                field = re.search(r"\$\.elasticity\.(\w+)", e.message)
                at = (*where, field.group(1)) if field else where
                self.problem(at, f"queue {name}: {e.message.replace('$.elasticity.', '')}")
            if spec.defaults is not None and spec.defaults.resources is not None:
                try:
                    check_resources(f"queue {name}: defaults", spec.defaults.resources)
                except Invalid as e:
                    self.problem((*path, name, "defaults", "resources"), e.message)

    def daemons(self, specs: dict[str, DaemonSpec], path: Path) -> None:
        stems: dict[str, str] = {}
        for key, spec in specs.items():
            stem = daemon_stem(key, spec)
            where = (*path, key, "name") if spec.name else (*path, key)
            try:
                # Beyond their canonical names a group takes <stem>-NN: that must be valid.
                validate_name("daemon", f"{stem}-00")
            except InvalidName:
                self.problem(
                    where,
                    f"daemon group {key}: name {stem!r} is too long to number its daemons "
                    f"({stem}-00 …): use at most {NAME_MAX - 3} characters",
                    key=not spec.name,
                )
            if stem in stems:
                self.problem(
                    where,
                    f"daemon groups {stems[stem]} and {key} both name their daemons {stem!r}: "
                    "give one of them another `name`",
                    key=not spec.name,
                )
            stems.setdefault(stem, key)
            for i, queue in enumerate(spec.queues):
                if queue == DEFAULT_QUEUE:
                    self.problem(
                        (*path, key, "queues", i),
                        f"daemon group {key}: 'default' cannot be listed: the default queue is "
                        "the empty list (queues: [])",
                    )
            self.labels(spec.labels, (*path, key, "labels"), f"daemon group {key}")

    def labels(self, labels: dict[str, str], path: Path, what: str) -> None:
        for label in labels:
            if label in RESERVED_LABELS:
                self.problem(
                    (*path, label),
                    f"{what}: label {label} is set by compose itself: remove it",
                    key=True,
                )
            elif "=" in label:
                self.problem(
                    (*path, label), f"{what}: label key {label!r} must not contain '='", key=True
                )

    # ---- helpers -----------------------------------------------------------------------

    def unknown(self, data: dict[str, Any], path: Path, known: tuple[str, ...], where: str):
        for key in data:
            if key not in known:
                self.problem((*path, key), unknown_key(key, known, where), key=True)

    def name(self, what: str, value: Any, path: Path) -> None:
        if not isinstance(value, str):
            self.problem(path, f"{what} must be a name (a string); got {kind_of(value)}")
            return
        try:
            validate_name(what, value)
        except InvalidName as e:
            self.problem(path, e.message)

    def key_name(self, what: str, value: str, path: Path) -> None:
        try:
            validate_name(what, value)
        except InvalidName as e:
            self.problem(path, e.message, key=True)

    def struct(self, value: Any, cls: type[Struct], path: Path, what: str, rel: Path = ()):
        """``value`` as the Struct ``cls``, checked field by field so that every bad field
        is reported; ``None`` when one is."""
        if not isinstance(value, dict):
            return self.convert(value, cls, path, what=what, rel=rel)
        before = len(self.problems)
        fields = {f.name: f for f in msgspec.structs.fields(cls)}
        self.unknown(value, path, tuple(fields), " ".join([what, dotted(rel)]).strip())
        for f in fields.values():
            if f.required and f.name not in value:
                self.problem(path, f"{what}: `{dotted((*rel, f.name))}` is required")
        for name, item in value.items():
            if name not in fields:
                continue
            kind = fields[name].type
            if isinstance(kind, type) and issubclass(kind, Struct):
                self.struct(item, kind, (*path, name), what, (*rel, name))
            else:
                self.convert(item, kind, (*path, name), what=what, rel=(*rel, name))
        if len(self.problems) > before:
            return None
        return self.convert(value, cls, path, what=what, rel=rel)

    def convert(self, value: Any, type_: Any, path: Path, *, what: str = "", rel: Path = ()):
        """``value`` as ``type_``, or ``None`` after recording msgspec's problem."""
        try:
            return msgspec.convert(value, type_)
        except msgspec.ValidationError as e:
            self._msgspec(str(e), value, type_, path, what, rel)
            return None

    def _msgspec(
        self, error: str, value: Any, type_: Any, path: Path, what: str, outer: Path
    ) -> None:
        found = explain(error, value, type_, what, outer)
        self.problem((*path, *found.path), found.message, key=found.key)


__all__ = ["SECTIONS", "ComposeFileInvalid", "Declared", "load", "parse", "project_from_dir"]
