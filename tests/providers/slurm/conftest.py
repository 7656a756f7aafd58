"""The Slurm provider's tests run against a real one-node Slurm cluster (``slurmd.py``).

``slurm_cluster`` starts it once per session; a machine that cannot run it (not root, no
slurm-wlm or munge) fails the tests that need it, with what to install — never skips.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slurmd import SlurmCluster, missing


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """munged, slurmctld and slurmd on this host; ``.conf`` is their slurm.conf."""
    if (why := missing()) is not None:
        pytest.fail(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        try:
            cluster.start()
        except RuntimeError as e:
            pytest.fail(str(e))
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster, with no job left over from this test at its end."""
    yield slurm_cluster
    slurm_cluster.cancel_all()
