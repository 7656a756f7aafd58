"""YAML read into plain values, with where each value and key was written.

:func:`read` composes the YAML node graph (``yaml.compose``) and builds plain dicts, lists
and scalars from it itself, keeping the line and column of every value and of every
mapping key under the value's *path* (the keys and list indexes from the top). A checker
can then point at ``lakeshore.yaml:LINE:COL`` for any value it rejects.

String values may name environment variables, ``${NAME}`` or ``${NAME:-default}``
(:mod:`lakeshore.compose.variables`). What PyYAML would accept silently is refused here: a
key given twice (the later one would win), aliases (``*name``: one value at two places has
no single place to point at) and merge keys (``<<``), and keys that are not strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import yaml

from lakeshore.compose.variables import UnsetVariable, has_references, interpolate

#: A value's place in the file: the mapping keys and list indexes from the top.
Path = tuple[str | int, ...]

_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"


class Mark(NamedTuple):
    """A place in the file, both 1-based (as editors count)."""

    line: int
    column: int


class Problem(NamedTuple):
    """One thing wrong with the file, at a place."""

    mark: Mark
    message: str


class Marks:
    """Where each value (and each mapping key) of a file was written."""

    def __init__(self) -> None:
        self._values: dict[Path, Mark] = {}
        self._keys: dict[Path, Mark] = {}

    def add(self, path: Path, value: yaml.Mark, key: yaml.Mark | None = None) -> None:
        self._values[path] = _mark(value)
        if key is not None:
            self._keys[path] = _mark(key)

    def value(self, path: Path) -> Mark:
        """Where the value at ``path`` starts; for a path the file does not have (a missing
        field), where its nearest enclosing value starts."""
        while path not in self._values and path:
            path = path[:-1]
        return self._values.get(path, Mark(1, 1))

    def key(self, path: Path) -> Mark:
        """Where the key of the mapping entry at ``path`` is written (else as :meth:`value`)."""
        return self._keys.get(path) or self.value(path)


class YamlProblems(Exception):
    """The text is not YAML this reader accepts; ``problems`` says where and why."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self.problems = problems


def read(text: str, env: Mapping[str, str] | None = None) -> tuple[Any, Marks, list[Problem]]:
    """The file's value (``None`` for an empty file), where each part of it is, and what
    it holds that this reader refuses: aliases, merge keys, duplicate keys (the first one
    is kept), keys that are not strings (left out) and unset variables.

    Args:
        env: the variables ``${NAME}`` in string values is replaced from
            (:mod:`lakeshore.compose.variables`); ``None``: nothing is replaced.

    Raises:
        YamlProblems: the text is not YAML (a syntax error, several documents).
    """
    try:
        aliases = [e for e in yaml.parse(text, Loader=yaml.SafeLoader) if _is_alias(e)]
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = _mark(mark) if mark is not None else Mark(1, 1)
        raise YamlProblems([Problem(where, f"not valid YAML: {e.problem or e}")]) from None
    builder = _Builder(env)
    builder.problems += [
        Problem(_mark(e.start_mark), f"alias *{e.anchor} is not supported: write the value out")
        for e in aliases
    ]
    value = builder.build(root, ()) if root is not None else None
    return value, builder.marks, builder.problems


def _is_alias(event: yaml.Event) -> bool:
    return isinstance(event, yaml.AliasEvent)


def _mark(mark: yaml.Mark) -> Mark:
    return Mark(mark.line + 1, mark.column + 1)


class _Builder:
    def __init__(self, env: Mapping[str, str] | None) -> None:
        self.marks = Marks()
        self.problems: list[Problem] = []
        self._env = env
        self._scalars = yaml.constructor.SafeConstructor()
        self._resolver = yaml.resolver.Resolver()

    def build(self, node: yaml.Node, path: Path, key: yaml.Node | None = None) -> Any:
        self.marks.add(path, node.start_mark, key.start_mark if key is not None else None)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self._scalar(node)

    def _scalar(self, node: yaml.Node) -> Any:
        if self._env is not None and node.tag == _STR and has_references(node.value):
            try:
                text = interpolate(node.value, self._env)
            except UnsetVariable as e:
                self.problems.append(Problem(_mark(node.start_mark), str(e)))
                return node.value  # as written: the checks after this see a string
            # A plain scalar's type is what its text says once replaced (port: ${PORT}).
            plain = node.style is None
            tag = self._resolver.resolve(yaml.ScalarNode, text, (True, False)) if plain else _STR
            node = yaml.ScalarNode(tag, text, node.start_mark, node.end_mark, style=node.style)
        return self._scalars.construct_object(node, deep=True)

    def _mapping(self, node: yaml.MappingNode, path: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first: dict[str, Mark] = {}
        for key_node, value_node in node.value:
            where = _mark(key_node.start_mark)
            if key_node.tag == _MERGE:
                self.problems.append(
                    Problem(where, "merge keys (<<) are not supported: write the keys out")
                )
                continue
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STR:
                shown = getattr(key_node, "value", "?")
                self.problems.append(
                    Problem(where, f'key {shown!r} is not a string: quote it ("{shown}")')
                )
                continue
            key = key_node.value
            if key in first:
                self.problems.append(
                    Problem(
                        where,
                        f"duplicate key {key!r} (first at line {first[key].line}): "
                        "keep one of them",
                    )
                )
                continue
            first[key] = where
            out[key] = self.build(value_node, (*path, key), key_node)
        return out


__all__ = ["Mark", "Marks", "Path", "Problem", "YamlProblems", "read"]
