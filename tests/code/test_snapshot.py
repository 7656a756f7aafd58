"""Code snapshots (spec/code.md): what goes in, the same bytes for the same files, the
bounds and the refusals — real directories, real files, a real tar read back."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from lakeshore.code import SnapshotTooLarge, pack, unpack, verify
from lakeshore.code.snapshot import digest_of
from lakeshore.errors import Invalid


def _tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(body)
    return root


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getnames()


def test_a_snapshot_holds_the_code_and_leaves_out_what_never_ships(tmp_path: Path) -> None:
    root = _tree(
        tmp_path / "proj",
        {
            "tasks.py": "def double(x):\n    return 2 * x\n",
            "pkg/__init__.py": "",
            "pkg/util.py": "X = 1\n",
            "data/input.csv": "a,b\n1,2\n",
            ".git/HEAD": "ref: refs/heads/main\n",
            "pkg/__pycache__/util.cpython-311.pyc": b"\x00\x01",
            "stray.pyc": b"\x00",
            "venv/pyvenv.cfg": "home = /usr/bin\n",
            "venv/lib/site.py": "",
            "runs/out.log": "big\n",
            "keep.log": "kept\n",
            "notes/draft.txt": "x\n",
            ".lakeshore/config.toml": 'token = "lsk_secret"\n',  # a server's, a client's
            ".lakeshoreignore": "# outputs\n*.log\n!keep.log\nruns/\n/notes\n",
        },
    )
    snap = pack(root)
    assert _names(snap.data) == [
        ".lakeshoreignore", "data/input.csv", "keep.log", "pkg/__init__.py", "pkg/util.py",
        "tasks.py",
    ]  # fmt: skip
    assert snap.files == 6 and snap.digest.startswith("sha256:") and len(snap.digest) == 71


def test_the_same_files_make_the_same_bytes_and_a_change_a_new_digest(tmp_path: Path) -> None:
    files = {"tasks.py": "def f():\n    return 1\n", "bin/run.sh": "#!/bin/sh\necho hi\n"}
    a, b = _tree(tmp_path / "a", files), _tree(tmp_path / "b", files)
    (a / "bin/run.sh").chmod(0o755)
    (b / "bin/run.sh").chmod(0o755)
    os.utime(b / "tasks.py", (1_000_000, 1_000_000))  # another mtime, another owner's copy
    first, second = pack(a), pack(b)
    assert first.data == second.data and first.digest == second.digest
    (b / "tasks.py").write_text("def f():\n    return 2\n")
    assert pack(b).digest != first.digest
    (a / "bin/run.sh").chmod(0o644)  # the executable bit is part of the code
    assert pack(a).digest != first.digest


def test_unpack_checks_the_digest_and_restores_files_and_modes(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", {"tasks.py": "V = 1\n", "tool.sh": "#!/bin/sh\n"})
    (root / "tool.sh").chmod(0o755)
    snap = pack(root)
    out = unpack(snap.data, snap.digest, tmp_path / "cache" / "x")
    assert (out / "tasks.py").read_text() == "V = 1\n"
    assert os.access(out / "tool.sh", os.X_OK) and not os.access(out / "tasks.py", os.X_OK)
    corrupted = snap.data.replace(b"V = 1", b"V = 2")
    with pytest.raises(Invalid, match="does not match its digest"):
        verify(corrupted, snap.digest)
    with pytest.raises(Invalid, match="does not match its digest"):
        unpack(corrupted, snap.digest, tmp_path / "cache" / "y")
    assert not (tmp_path / "cache" / "y").exists()  # nothing written from bad bytes


def test_a_tar_with_an_entry_outside_its_directory_is_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escape.py")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    data = buf.getvalue()
    with pytest.raises(Invalid, match="unexpected entry '../escape.py'"):
        unpack(data, digest_of(data), tmp_path / "out")
    assert not (tmp_path / "escape.py").exists()


def test_a_snapshot_over_its_bounds_names_its_size_and_largest_files(tmp_path: Path) -> None:
    root = _tree(
        tmp_path / "big",
        {"model.bin": b"\0" * 300_000, "data/shard.npy": b"\0" * 200_000, "tasks.py": "x=1\n"},
    )
    with pytest.raises(SnapshotTooLarge) as refused:
        pack(root, max_bytes=100_000)
    message = str(refused.value)
    assert "488.3 KiB in 3 files, over code_max_bytes 97.7 KiB" in message
    assert "model.bin (293.0 KiB), data/shard.npy (195.3 KiB)" in message
    assert ".lakeshoreignore" in message and refused.value.http_status == 413
    with pytest.raises(SnapshotTooLarge, match="over code_max_files 2"):
        pack(root, max_files=2)
    (root / ".lakeshoreignore").write_text("*.bin\ndata/\n")
    assert pack(root, max_bytes=100_000).files == 2


def test_what_is_not_a_directory_or_cannot_be_read_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(Invalid, match="does not exist"):
        pack(tmp_path / "missing")
    (tmp_path / "file.py").write_text("")
    with pytest.raises(Invalid, match="is not a directory"):
        pack(tmp_path / "file.py")
    root = _tree(tmp_path / "proj", {"tasks.py": "", "secret.key": "k"})
    os.symlink("/etc/hostname", root / "outside")
    with pytest.raises(Invalid, match="outside links outside the directory"):
        pack(root)
    (root / "outside").unlink()
    os.symlink("tasks.py", root / "alias.py")  # inside: packed as the file it names
    assert "alias.py" in _names(pack(root).data)
    # A file that cannot be read — a link to nothing, a pipe — is named, nothing is packed
    # (made so as root too, where permissions do not stop a read).
    os.symlink("gone.py", root / "dangling.py")
    with pytest.raises(Invalid, match="cannot read dangling.py: No such file"):
        pack(root)
    (root / "dangling.py").unlink()
    os.mkfifo(root / "pipe")
    with pytest.raises(Invalid, match="pipe is not a regular file"):
        pack(root)
