"""A daemon's inventory (spec/resources.md): GPUs from ``nvidia-smi`` — a stand-in printing
real captured output of H100 and A100 hosts (captures/README.md), since these machines have
no GPU — within the daemon's own ``CUDA_VISIBLE_DEVICES``; CPUs and memory from the cgroup;
the ``--gpus/--cpus/--memory`` overrides; the gpu type rule."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from lakeshore.cli.main import lakeshore
from lakeshore.daemon import inventory
from lakeshore.errors import Invalid
from lakeshore.model import Capacity, Gpu, Resources, describe_capacity, fits
from lakeshore.model.resources import gpu_type_matches

HERE = Path(__file__).parent
FAKE_BIN = HERE / "bin"
CAPTURES = HERE / "captures"
H100_0 = Gpu(
    index=0, uuid="GPU-f75045e8-4d87-49d1-2eb9-39ec2baddf9b", name="NVIDIA H100 80GB HBM3",
    memory_mib=81559,
)  # fmt: skip


def host(name: str, **extra: str) -> dict[str, str]:
    """A daemon environment whose ``nvidia-smi`` prints host ``name``'s captured output."""
    path = f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}"
    return {"PATH": path, "FAKE_NVIDIA_SMI_HOST": str(CAPTURES / name), **extra}


def test_gpus_are_read_from_nvidia_smi_with_index_uuid_name_and_memory() -> None:
    gpus = inventory.detect_gpus(host("h100x8"))
    assert len(gpus) == 8 and gpus[0] == H100_0
    assert [g.index for g in gpus] == list(range(8))
    assert len({g.uuid for g in gpus}) == 8
    a100 = inventory.detect_gpus(host("a100x8"))
    assert {(g.name, g.memory_mib) for g in a100} == {("NVIDIA A100-SXM4-80GB", 81920)}


@pytest.mark.parametrize(
    ("visible", "indices"),
    [
        ("2,3", [2, 3]),
        ("3,1", [3, 1]),
        ("GPU-5627db28", [2]),  # a uuid's prefix, as CUDA takes it
        ("GPU-5627db28-13f8-7f0a-72fd-b59af5f9f870,0", [2, 0]),
        ("", []),
        ("0,9,1", [0]),  # CUDA stops at the first entry naming no device
        ("-1", []),
    ],
)
def test_only_the_devices_in_the_daemons_cuda_visible_devices_are_its(visible, indices) -> None:
    gpus = inventory.detect_gpus(host("a100x8", CUDA_VISIBLE_DEVICES=visible))
    assert [g.index for g in gpus] == indices


def test_a_host_without_nvidia_smi_or_whose_driver_fails_has_no_gpu(caplog) -> None:
    assert inventory.detect_gpus({"PATH": "/nonexistent"}) == []
    caplog.set_level(logging.WARNING, "lakeshore.daemon.inventory")
    assert inventory.detect_gpus(host("h100x8", FAKE_NVIDIA_SMI_FAIL="1")) == []
    assert "nvidia-smi failed (exit 9: NVIDIA-SMI has failed" in caplog.text


def test_gpus_override_keeps_declares_or_drops_devices(tmp_path) -> None:
    env = host("h100x8")
    detect = lambda gpus: inventory.detect(env, gpus=gpus, cgroup=tmp_path).gpus  # noqa: E731
    assert [g.index for g in detect("2")] == [0, 1]
    assert [g.index for g in detect("1,3")] == [1, 3] and detect("1,3")[0].uuid.startswith("GPU-")
    assert detect("none") == [] and detect("0") == []
    bare = {"PATH": "/nonexistent"}
    declared = inventory.detect(bare, gpus="4", cgroup=tmp_path).gpus
    assert declared == [Gpu(index=i) for i in range(4)]
    with pytest.raises(Invalid, match=r"--gpus 9: this host has 8 GPU\(s\)"):
        detect("9")
    with pytest.raises(Invalid, match="no GPU 8 here; this host has 0, 1, 2"):
        detect("0,8")
    for bad in ("two", "-1", "1,1", "65"):
        with pytest.raises(Invalid, match="--gpus"):
            inventory.parse_gpus(bad)


def test_cpus_and_memory_come_from_the_cgroup_else_the_host(tmp_path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "memory.max").write_text(f"{8 * 1024**3}\n")
    got = inventory.detect({"PATH": "/nonexistent"}, cgroup=tmp_path)
    assert got == Capacity(cpus=1.5, memory=8 * 1024**3)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "memory.max").write_text("max\n")
    got = inventory.detect({"PATH": "/nonexistent"}, cgroup=tmp_path)
    assert got.cpus == len(os.sched_getaffinity(0))
    meminfo = Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]
    assert got.memory == int(meminfo) * 1024
    # Given, not detected; detected CPUs are at least the daemon's run slots.
    given = inventory.detect({"PATH": "/nonexistent"}, cpus=3, memory="16G", cgroup=tmp_path)
    assert (given.cpus, given.memory) == (3, 16 * 1024**3)
    many = inventory.detect({"PATH": "/nonexistent"}, at_least_cpus=500, cgroup=tmp_path)
    assert many.cpus == 500


@pytest.mark.parametrize(
    ("wanted", "name", "matches"),
    [
        ("H100", "NVIDIA H100 80GB HBM3", True),
        ("h100", "NVIDIA H100 80GB HBM3", True),
        ("H100-80GB", "NVIDIA H100 80GB HBM3", True),
        ("H10", "NVIDIA H100 80GB HBM3", False),
        ("A100", "NVIDIA A100-SXM4-80GB", True),
        ("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", True),
        ("A100", "NVIDIA H100 80GB HBM3", False),
        ("80GB", "NVIDIA A100-SXM4-80GB", True),
    ],
)
def test_a_gpu_type_is_whole_words_of_the_device_name(wanted, name, matches) -> None:
    assert gpu_type_matches(wanted, Gpu(index=0, name=name), {}) is matches


def test_a_gpu_type_label_names_the_type_of_every_gpu_of_the_daemon() -> None:
    declared = Gpu(index=0)
    assert gpu_type_matches("h100", declared, {"gpu_type": "H100"})
    assert not gpu_type_matches("A100", H100_0, {"gpu_type": "H100"})


def test_a_request_fits_what_a_daemon_has() -> None:
    four = Capacity(gpus=[Gpu(index=i, name="NVIDIA H100 80GB HBM3") for i in range(4)], cpus=8)
    assert fits(Resources(gpus=4, gpu_type="H100", cpus=8), four, {})
    assert not fits(Resources(gpus=5), four, {})
    assert not fits(Resources(gpus=1, gpu_type="A100"), four, {})
    assert not fits(Resources(cpus=8.5), four, {})
    assert fits(Resources(memory="1T"), four, {})  # memory not known: not counted
    assert not fits(Resources(memory="17G"), Capacity(cpus=1, memory=16 * 1024**3), {})
    assert describe_capacity(four) == "4 GPUs NVIDIA H100 80GB HBM3, 8 CPUs"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--gpus", "two"], "--gpus 'two': give a count (4), device indices (0,1) or none"),
        (["--memory", "16"], "'16' must be a number and a unit"),
        (["--cpus", "0"], "0<x<=1024"),
    ],
)
def test_daemon_run_refuses_a_bad_override_before_it_starts(flags, says) -> None:
    result = CliRunner().invoke(lakeshore, ["daemon", "run", *flags], prog_name="lakeshore")
    assert result.exit_code == 2 and says in result.output, result.output
