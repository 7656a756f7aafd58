"""``${NAME}`` in a compose file: the environment's value, as docker-compose does it.

``${NAME}`` is replaced by the variable's value (an unset one is an error), and
``${NAME:-default}`` by its value or, when it is unset or empty, ``default``. ``$${`` is a
literal ``${``; any other ``$`` is kept as written. Replacement happens inside string
scalars only (keys are never replaced), before the scalar's type is resolved, so
``port: ${PORT}`` is a number when the value is one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UnsetVariable(ValueError):
    """A ``${NAME}`` whose variable is not set (or a reference that is not well formed)."""


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """``text`` with every ``${…}`` replaced from ``env``.

    Raises:
        UnsetVariable: naming the variable and how to give it a value or a default.
    """

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, sep, default = match.group(1).partition(":-")
        if not _NAME.fullmatch(name):
            raise UnsetVariable(
                f"${{{match.group(1)}}} is not a variable reference: write ${{NAME}} or "
                "${NAME:-default} (and $${ for a literal ${)"
            )
        value = env.get(name)
        if sep:
            return value if value else default
        if value is None:
            raise UnsetVariable(
                f"variable {name} is not set: set it, or give a default as ${{{name}:-value}}"
            )
        return value

    return _REFERENCE.sub(replace, text)


def has_references(text: str) -> bool:
    return "${" in text


__all__ = ["UnsetVariable", "has_references", "interpolate"]
