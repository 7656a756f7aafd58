"""Running daemons that no project owns, and the group that could adopt them.

A group short of its ``count`` looks at the namespace's hand-launched daemons that carry
no ``lakeshore.io/project`` label and are starting, idle or busy. One **matches** the
group when it runs on the group's provider, pulls from exactly the group's queues, is
named ``<stem>`` or ``<stem>-NN`` and has no label the group would set otherwise. So a
fleet launched by hand (``daemon launch --name prep --count 4``) and then declared is
recognised instead of doubled:

- with ``--adopt`` the matches are labelled as the group's (``~ daemons prep: adopt …``),
  as many as the group is short, lowest names first, and count toward ``count``;
- without it the group launches nothing and the plan says why (``!``), since launching
  its count beside them would double the fleet.

A daemon that matches only in part (its name, or its provider and queues) is not
adopted, and its ``? unmanaged`` line says what differs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from msgspec import Struct

from lakeshore.compose.changes import AdoptDaemons, Change, Op, WorkerRef
from lakeshore.compose.display import value
from lakeshore.compose.spec import PROJECT_LABEL, DaemonSpec
from lakeshore.model import Worker, WorkerStatus

#: Daemons that can be adopted: running, or about to (``retiring`` ones are on their way
#: out); the statuses of a group's members (``groups.MEMBER``).
_RUNNING = frozenset({WorkerStatus.STARTING, WorkerStatus.IDLE, WorkerStatus.BUSY})


class Adoption(Struct, frozen=True, kw_only=True):
    """What a group does with the unowned daemons that match it."""

    #: the group's line about them: ``~ … adopt`` or ``! … match but are not the project's``
    changes: list[Change] = []
    #: the daemons adopted (with ``--adopt``): they count toward the group's ``count``
    adopted: list[Worker] = []
    #: matches were found but not adopted (no ``--adopt``): the group launches nothing
    withheld: bool = False
    #: the daemons the group's line names (not listed again as unmanaged)
    named: frozenset[str] = frozenset()
    #: the other daemons the group looked at, by name: why each was not adopted
    notes: dict[str, str] = {}


#: A group that is not short of its count looks at nothing.
NOTHING = Adoption()


def unowned(workers: Iterable[Worker]) -> list[Worker]:
    """The hand-launched running daemons that no project owns, by name."""
    return sorted(
        (
            w
            for w in workers
            if not w.managed and w.status in _RUNNING and PROJECT_LABEL not in w.labels
        ),
        key=lambda w: w.name,
    )


def consider(
    namespace: str,
    key: str,
    spec: DaemonSpec,
    stem: str,
    labels: dict[str, str],
    short: int,
    candidates: list[Worker],
    *,
    adopt: bool,
) -> Adoption:
    """What group ``key``, ``short`` daemons below its count, does with ``candidates``.

    Args:
        stem: the stem of the group's names.
        labels: the labels of the group's daemons (the file's and compose's).
        candidates: :func:`unowned` daemons no earlier group has named.
        adopt: ``--adopt`` was given.
    """
    if short <= 0:
        return NOTHING
    matching: list[Worker] = []
    notes: dict[str, str] = {}
    for w in candidates:
        why = _mismatch(w, spec, stem, labels)
        if why is None:
            matching.append(w)
        elif why:
            notes[w.name] = f"not adopted by group {key}: {why}"
    if not matching:
        return Adoption(notes=notes)
    if not adopt:
        names = " ".join(w.name for w in matching)
        n = len(matching)
        match = "1 running daemon matches" if n == 1 else f"{n} running daemons match"
        them = "it" if n == 1 else "them"
        refused = Change(
            namespace=namespace,
            op=Op.CANNOT,
            subject="daemons",
            name=key,
            summary=f"{match} ({names}) but {'is' if n == 1 else 'are'} not the project's; "
            f"none launched beside {them}: compose up --adopt adopts {them}, "
            f"or stop {them} (lakeshore daemon stop NAME)",
        )
        return Adoption(
            changes=[refused], withheld=True, named=frozenset(w.name for w in matching), notes=notes
        )
    taken, spare = matching[:short], matching[short:]
    for w in spare:
        notes[w.name] = (
            f"matches group {key}, which has its count ({spec.count}) with those adopted"
        )
    adopting = Change(
        namespace=namespace,
        op=Op.PATCH,
        subject="daemons",
        name=key,
        summary="adopt " + " ".join(w.name for w in taken),
        action=AdoptDaemons(
            workers=[WorkerRef(id=w.id, name=w.name) for w in taken], labels=dict(labels)
        ),
    )
    return Adoption(
        changes=[adopting],
        adopted=taken,
        named=frozenset(w.name for w in taken),
        notes=notes,
    )


def _mismatch(w: Worker, spec: DaemonSpec, stem: str, labels: dict[str, str]) -> str | None:
    """``None``: ``w`` matches the group; ``""``: it is unrelated (nothing to say); else
    what differs."""
    named = re.fullmatch(rf"{re.escape(stem)}(-\d\d)?", w.name) is not None
    provider = w.provider == spec.provider
    queues = set(w.queues) == set(spec.queues)
    if not named:
        if provider and queues:
            return f"its name is not {stem} or {stem}-NN"
        return ""
    if not provider:
        return f"provider differs ({w.provider}; the file: {spec.provider})"
    if not queues:
        return f"queues differ ({value(list(w.queues))}; the file: {value(list(spec.queues))})"
    other = {k: v for k, v in w.labels.items() if labels.get(k) != v}
    if other:
        return f"labels differ ({value(other)} are not the group's)"
    return None


__all__ = ["NOTHING", "Adoption", "consider", "unowned"]
