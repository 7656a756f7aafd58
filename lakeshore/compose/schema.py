"""The JSON Schema of ``lakeshore.yaml`` (``lakeshore compose schema``), for editors.

It is msgspec's schema of :class:`~lakeshore.compose.spec.ComposeFile`, so it follows the
Structs the loader converts into. Two rules are the loader's alone: ``namespaces``
excludes the top sections and ``namespace``, and names are checked by
:func:`lakeshore.model.validate_name` as well (the schema has their pattern).
"""

from __future__ import annotations

from typing import Any

import msgspec

from lakeshore.compose.spec import ComposeFile

#: The JSON Schema dialect msgspec writes.
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema() -> dict[str, Any]:
    """The schema, with ``$schema`` and ``title`` at the top."""
    body = msgspec.json.schema(ComposeFile)
    return {
        "$schema": DIALECT,
        "title": "lakeshore.yaml",
        "description": "Lakeshore compose file: providers, queues and daemons per namespace.",
        **body,
    }


__all__ = ["DIALECT", "schema"]
