"""The plan as a pure function of a checked file and a live snapshot (no server)."""

from __future__ import annotations

import msgspec
import pytest

from lakeshore.compose import Declared, Live, Op, parse, plan_down, plan_up
from lakeshore.compose.changes import (
    ArchiveQueue,
    CreateNamespace,
    EditMembership,
    LaunchDaemons,
    PatchQueue,
    RetireDaemons,
)
from lakeshore.compose.display import change_lines
from lakeshore.compose.spec import DAEMON_LABEL, PROJECT_LABEL
from lakeshore.elasticity import build
from lakeshore.model import (
    Provider,
    ProviderKind,
    Queue,
    QueueKind,
    QueueState,
    Worker,
    WorkerStatus,
    now,
)

NS = "default"
OURS = {PROJECT_LABEL: "demo"}


def declared(text: str) -> Declared:
    spec = parse(text)
    return Declared(file="lakeshore.yaml", project="demo", namespaces=spec.by_namespace(NS))


def snapshot(*, queues=(), providers=(), workers=(), exists=True) -> dict[str, Live]:
    return {
        NS: Live(
            namespace=NS,
            exists=exists,
            queues=list(queues),
            providers=list(providers),
            workers=list(workers),
        )
    }


def queue(name: str, **fields) -> Queue:
    t = now()
    return Queue(name=name, namespace=NS, created_at=t, updated_at=t, **fields)


def provider(name: str, kind: ProviderKind = ProviderKind.SSH, **fields) -> Provider:
    return Provider(name=name, namespace=NS, kind=kind, created_at=now(), **fields)


def worker(name: str, status=WorkerStatus.IDLE, group: str | None = "train", **fields) -> Worker:
    labels = {**OURS, DAEMON_LABEL: group} if group else {}
    fields.setdefault("labels", labels)
    fields.setdefault("provider", "local")
    fields.setdefault("queues", ["q"])
    return Worker(
        id=f"w-{name}", name=name, namespace=NS, status=status, started_at=now(), **fields
    )


def lines(plan) -> list[str]:
    return [line for c in plan.changes for line in change_lines(c)]


def group_file(count: int, queues: str = "[q]") -> Declared:
    return declared(f"daemons:\n  train: {{queues: {queues}, count: {count}}}\n")


# ---- daemon groups -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "names"),
    [(1, ["train"]), (3, ["train-00", "train-01", "train-02"])],
)
def test_a_new_group_gets_the_launchers_canonical_names(count, names):
    plan = plan_up(group_file(count), snapshot())
    (change,) = plan.changes
    assert change.op is Op.CREATE
    assert isinstance(change.action, LaunchDaemons)
    assert change.action.names == names
    assert change.action.labels == {**OURS, DAEMON_LABEL: "train"}


def test_names_held_by_live_workers_are_skipped_for_the_next_free_ones():
    workers = [
        worker("train-00"),
        worker("train-01", group=None, labels={PROJECT_LABEL: "other"}),  # another project's
        worker("train-02", status=WorkerStatus.STOPPED),  # a dead row frees its name
    ]
    plan = plan_up(group_file(3), snapshot(workers=workers))
    (change,) = [c for c in plan.changes if c.op is Op.CREATE]
    assert change.action.names == ["train-02", "train-03"]


def test_a_lost_member_is_relaunched_under_its_name():
    workers = [worker("train-00"), worker("train-05", status=WorkerStatus.LOST)]
    (change,) = plan_up(group_file(2), snapshot(workers=workers)).changes
    assert change.action.names == ["train-05"]


def test_extra_members_retire_idle_first_then_highest_names():
    workers = [
        worker("train-00"),
        worker("train-01", status=WorkerStatus.BUSY),
        worker("train-02", status=WorkerStatus.BUSY),
        worker("train-03"),
    ]
    (change,) = plan_up(group_file(1), snapshot(workers=workers)).changes
    assert change.op is Op.REMOVE
    assert isinstance(change.action, RetireDaemons)
    assert [w.name for w in change.action.workers] == ["train-03", "train-00", "train-02"]
    assert change_lines(change) == ["- daemons train: retire train-03 train-00 train-02"]


def test_retiring_and_managed_workers_are_not_members():
    workers = [
        worker("train-00", status=WorkerStatus.RETIRING),
        worker("train-01", managed=True),
    ]
    (change,) = plan_up(group_file(1), snapshot(workers=workers)).changes
    # train-00 still holds its name while it retires, so the one canonical name is used.
    assert change.action.names == ["train"]


def test_membership_is_edited_in_place():
    workers = [worker("train", queues=["q", "old"])]
    (change,) = plan_up(group_file(1, "[q, new]"), snapshot(workers=workers)).changes
    assert change.op is Op.PATCH
    assert change.action == EditMembership(worker=change.action.worker, add=["new"], remove=["old"])
    assert change_lines(change) == ['~ daemon train: queues: ["q", "old"] → ["q", "new"]']


def test_a_running_daemons_provider_or_labels_cannot_change():
    workers = [worker("train", queues=["q"], provider="other")]
    plan = plan_up(group_file(1), snapshot(workers=workers))
    (change,) = plan.changes
    assert change.op is Op.CANNOT and change.action is None
    assert change_lines(change)[0] == '! daemon train: provider: "other" → "local"'
    assert plan.pending


def test_a_group_on_an_unknown_provider_cannot_be_launched():
    text = "daemons:\n  train: {provider: nowhere, count: 1}\n"
    (change,) = plan_up(declared(text), snapshot()).changes
    assert change.op is Op.CANNOT
    assert "provider nowhere does not exist" in change.summary


# ---- queues and providers ---------------------------------------------------------------


def test_elasticity_is_compared_after_the_servers_defaults_for_its_kind():
    text = "queues:\n  q: {elasticity: {kind: elastic, max: 4}}\n"
    live_e = build({"kind": "elastic", "max": 4})
    assert live_e.min == 1  # elastic's default min
    in_sync = plan_up(declared(text), snapshot(queues=[queue("q", elasticity=live_e, labels=OURS)]))
    assert in_sync.changes == [] and not in_sync.pending

    drifted = msgspec.structs.replace(live_e, min=2, steal_delay_s=5.0)
    plan = plan_up(declared(text), snapshot(queues=[queue("q", elasticity=drifted, labels=OURS)]))
    (change,) = plan.changes
    assert lines(plan) == [
        "~ queue q: elasticity.min: 2 → 1",
        "~ queue q: elasticity.steal_delay_s: 5.0 → null",
    ]
    assert isinstance(change.action, PatchQueue)
    # The whole object is sent: the server merges a partial one into the current.
    assert change.action.body == {"elasticity": msgspec.to_builtins(live_e)}


def test_an_archived_declared_queue_is_unarchived_then_patched():
    live_q = queue("q", state=QueueState.ARCHIVED, max_depth=5, labels=OURS)
    plan = plan_up(declared("queues:\n  q: {max_depth: 10}\n"), snapshot(queues=[live_q]))
    assert lines(plan) == [
        '~ queue q: unarchive (state: "archived" → "active")',
        "~ queue q: max_depth: 5 → 10",
    ]


def test_a_queue_kind_change_cannot_be_applied():
    live_q = queue("q", kind=QueueKind.FIFO, labels=OURS)
    plan = plan_up(declared("queues:\n  q: {kind: priority}\n"), snapshot(queues=[live_q]))
    (change,) = plan.changes
    assert change.op is Op.CANNOT and change.action is None
    assert change_lines(change)[0] == '! queue q: kind: "fifo" → "priority"'


def test_an_unlabelled_declared_queue_is_adopted_but_another_projects_is_not():
    mine = plan_up(declared("queues:\n  q: {}\n"), snapshot(queues=[queue("q")]))
    assert lines(mine) == ['~ queue q: labels: {} → {"lakeshore.io/project": "demo"}']
    theirs = queue("q", labels={PROJECT_LABEL: "other"})
    (change,) = plan_up(declared("queues:\n  q: {}\n"), snapshot(queues=[theirs])).changes
    assert change.op is Op.CANNOT
    assert "belongs to project other" in change.summary


def test_a_provider_kind_change_cannot_be_applied_and_config_is_patched():
    text = "providers:\n  gpu: {kind: ssh, config: {hosts: [a]}}\n"
    same_kind = provider("gpu", config={"hosts": ["b"]}, labels=OURS)
    assert lines(plan_up(declared(text), snapshot(providers=[same_kind]))) == [
        '~ provider gpu: config: {"hosts": ["b"]} → {"hosts": ["a"]}'
    ]
    other_kind = provider("gpu", kind=ProviderKind.SLURM, config={"hosts": ["a"]}, labels=OURS)
    (change,) = plan_up(declared(text), snapshot(providers=[other_kind])).changes
    assert change.op is Op.CANNOT


def test_undeclared_objects_are_unmanaged_or_orphans():
    live = snapshot(
        queues=[queue("default"), queue("scratch"), queue("old", labels=OURS)],
        providers=[provider("local", kind=ProviderKind.LOCAL), provider("theirs")],
        workers=[worker("hand", group=None), worker("gone-00", group="gone")],
    )
    plan = plan_up(declared("queues: {}\n"), live)
    assert lines(plan) == [
        "? unmanaged provider theirs",
        "? unmanaged queue scratch",
        "? orphan queue old (up --remove-orphans would archive it)",
        "? orphan daemon gone-00 (group gone; up --remove-orphans retires it)",
        "? unmanaged daemon hand",
    ]
    assert not plan.pending
    removing = plan_up(declared("queues: {}\n"), live, remove_orphans=True)
    actions = [c.action for c in removing.changes if c.action is not None]
    assert actions[0] == ArchiveQueue(name="old")
    assert [w.name for w in actions[1].workers] == ["gone-00"]


def test_an_unknown_namespace_is_created_first():
    plan = plan_up(declared("queues:\n  q: {}\n"), snapshot(exists=False))
    assert isinstance(plan.changes[0].action, CreateNamespace)
    assert lines(plan)[:2] == ["+ namespace default", "+ queue q (fifo, fixed)"]


# ---- down -------------------------------------------------------------------------------


def test_down_takes_only_what_the_project_owns():
    text = """
    providers:
      gpu: {kind: ssh, config: {hosts: [a]}}
    queues:
      mine: {}
      adopted-not: {}
    daemons:
      train: {queues: [mine], count: 2}
    """
    live = snapshot(
        queues=[queue("mine", labels=OURS), queue("adopted-not"), queue("scratch")],
        providers=[provider("gpu", config={"hosts": ["a"]}, labels=OURS)],
        workers=[worker("train-00"), worker("train-01"), worker("hand", group=None)],
    )
    down = plan_down(declared(text), live)
    assert lines(down) == [
        "- daemons train: retire train-00 train-01",
        "- queue mine: archive",
        "? unmanaged queue adopted-not (not created by this project: left alone)",
    ]
    rm = plan_down(declared(text), live, rm=True)
    assert [line for line in lines(rm) if line.startswith("-")] == [
        "- daemons train: retire train-00 train-01",
        "- queue mine: delete",
        "- provider gpu: delete",
    ]
