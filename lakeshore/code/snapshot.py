"""A code snapshot: a directory's files packed reproducibly and named by their digest
(spec/code.md). Pure: it reads the directory and returns bytes, nothing is sent.

What goes in: every regular file under the directory, minus ``.git``, virtualenvs (a
directory holding ``pyvenv.cfg``), ``__pycache__``, ``*.pyc`` and ``.lakeshore`` (a server's
data and a client's token), and what the directory's
``.lakeshoreignore`` lists (gitignore syntax, :mod:`pathspec`'s matcher — ``!`` re-includes,
a trailing ``/`` means a directory, a leading ``/`` anchors at the top). A symbolic link is
followed when it points inside the directory (the file it names is packed under the link's
path); one pointing outside is refused, never followed out of the tree.

How: an uncompressed POSIX tar, entries sorted by path, every header normalised (mtime 0,
owner 0, no names, mode ``0o755`` for a file its owner may execute else ``0o644``), so the
same files always make the same bytes on any machine. The **digest** is the SHA-256 of those
bytes (``sha256:`` and 64 hex digits); what is stored may be compressed, the digest is
checked on the tar itself after unpacking it (:func:`verify`).

Bounds: a snapshot over ``max_bytes`` (the files' sizes together) or ``max_files`` is
refused before anything is packed, naming its size, its file count and its largest files.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pathspec

from lakeshore.errors import Invalid, SnapshotTooLarge

#: The file at a snapshot's top whose lines (gitignore syntax) leave files out.
IGNORE_FILE = ".lakeshoreignore"
#: Left out of every snapshot, before the ignore file is read (``.lakeshore/``: a server's
#: data dir and a client's config, with its token).
ALWAYS_IGNORED = (".git/", "__pycache__/", "*.pyc", ".lakeshore/")
#: A directory holding this file is a virtualenv: left out.
VENV_MARK = "pyvenv.cfg"
#: Default bounds (the server's ``code_max_bytes`` and ``code_max_files``).
MAX_BYTES = 100 * 1024 * 1024
MAX_FILES = 10_000
#: How many of the largest files a refusal names.
LARGEST_SHOWN = 5
DIGEST_PREFIX = "sha256:"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A packed directory: its tar bytes and their digest."""

    digest: str
    data: bytes
    files: int
    #: the files' sizes together (the tar adds headers and padding)
    size: int


@dataclass(frozen=True, slots=True)
class _Entry:
    path: str  # relative, POSIX
    source: Path  # the file read (a link's target inside the tree)
    size: int
    executable: bool
    mtime_ns: int


def pack(directory: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES,
         max_files: int = MAX_FILES) -> Snapshot:  # fmt: skip
    """Pack ``directory`` (its files, not the directory's own name).

    Raises:
        Invalid: ``directory`` is not a directory; a file cannot be read (named); a link
            points outside the directory.
        SnapshotTooLarge: over ``max_bytes`` or ``max_files``; nothing was packed.
    """
    root = directory_of(directory)
    entries = _walk(root, _ignored(root))
    _check_bounds(f"code {root}", [(e.path, e.size) for e in entries], max_bytes, max_files)
    data = _tar(root, entries)
    size = sum(e.size for e in entries)
    return Snapshot(digest=digest_of(data), data=data, files=len(entries), size=size)


def tree_digest(directory: str | os.PathLike[str], paths: list[str]) -> str:
    """The digest of the snapshot ``paths`` under ``directory`` make, packed again: an
    unpacked snapshot checked against its digest (files added beside them do not count).

    Raises:
        Invalid: a file is missing or cannot be read.
    """
    root = directory_of(directory)
    entries = [_entry(root, root / path, path) for path in sorted(paths)]
    return digest_of(_tar(root, entries))


def fingerprint(directory: str | os.PathLike[str]) -> tuple[tuple[str, int, int, bool], ...]:
    """What :func:`pack` would pack, by each file's path, size, mtime and mode, without
    reading a file: packing again is needed only when it changed (a producer packs once per
    change, not per submit).

    Raises:
        Invalid: as :func:`pack`.
    """
    root = directory_of(directory)
    return tuple((e.path, e.size, e.mtime_ns, e.executable) for e in _walk(root, _ignored(root)))


def _tar(root: Path, entries: list[_Entry]) -> bytes:
    """The reproducible tar of ``entries`` (see the module)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.path)
            info.size, info.mtime = e.size, 0
            info.mode = 0o755 if e.executable else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            try:
                with open(e.source, "rb") as f:
                    data = f.read()
            except OSError as err:
                raise Invalid(f"code {root}: cannot read {e.path}: {err.strerror}") from None
            if len(data) != e.size:  # it changed while packing: a snapshot is one moment
                raise Invalid(f"code {root}: {e.path} changed while it was packed; try again")
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def digest_of(data: bytes) -> str:
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def verify(data: bytes, digest: str) -> None:
    """Check fetched snapshot bytes against the digest they were asked by.

    Raises:
        Invalid: they differ (a corrupted or substituted snapshot).
    """
    got = digest_of(data)
    if got != digest:
        raise Invalid(f"code snapshot {digest} does not match its digest (got {got})")


def unpack(data: bytes, digest: str, dest: str | os.PathLike[str]) -> Path:
    """Verify ``data`` and write its files under ``dest`` (created); ``dest``.

    Raises:
        Invalid: the digest differs, or an entry is not a plain file under ``dest``.
    """
    verify(data, digest)
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        members = tar.getmembers()
        for member in members:
            if not member.isfile() or not _inside(member.name):
                raise Invalid(f"code snapshot {digest}: unexpected entry {member.name!r}")
        for member in members:  # plain files only, written by hand: no tar feature applies
            target = out / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
            target.chmod(0o755 if member.mode & stat.S_IXUSR else 0o644)
    return out


def check(data: bytes, digest: str, *, max_bytes: int = MAX_BYTES,
          max_files: int = MAX_FILES) -> tuple[int, int]:  # fmt: skip
    """Check an uploaded snapshot before it is stored: its digest, that it holds plain files
    only, each under its top, and its bounds; ``(size, files)``.

    Raises:
        Invalid: the digest differs, it is not a tar, or an entry is not a plain file
            under its top.
        SnapshotTooLarge: over ``max_bytes`` or ``max_files``.
    """
    verify(data, digest)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            members = tar.getmembers()
    except tarfile.TarError as e:
        raise Invalid(f"code snapshot {digest} is not a tar: {e}") from None
    for member in members:
        if not member.isfile() or not _inside(member.name):
            raise Invalid(f"code snapshot {digest}: unexpected entry {member.name!r}")
    files = [(m.name, m.size) for m in members]
    _check_bounds(f"code snapshot {digest}", files, max_bytes, max_files)
    return sum(n for _, n in files), len(files)


def directory_of(directory: str | os.PathLike[str]) -> Path:
    """``directory`` resolved, once it is one.

    Raises:
        Invalid: it does not exist, or is not a directory.
    """
    root = Path(directory)
    if not root.is_dir():
        what = "does not exist" if not root.exists() else "is not a directory"
        raise Invalid(f"code {str(directory)!r} {what}: give the directory to ship")
    return root.resolve()


def names(data: bytes) -> list[str]:
    """The paths of a snapshot's files, in its order."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return tar.getnames()


def _inside(name: str) -> bool:
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts


def _ignored(root: Path) -> pathspec.GitIgnoreSpec:
    lines = list(ALWAYS_IGNORED)
    ignore = root / IGNORE_FILE
    if ignore.is_file():
        try:
            lines += ignore.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise Invalid(f"code {root}: cannot read {IGNORE_FILE}: {e}") from None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _walk(root: Path, spec: pathspec.GitIgnoreSpec) -> list[_Entry]:
    """The files to pack, sorted by path; directories the spec ignores are not entered."""
    entries: list[_Entry] = []
    for top, dirs, files in os.walk(root, onerror=_unreadable(root)):
        here = Path(top)
        rel_top = here.relative_to(root).as_posix()
        prefix = "" if rel_top == "." else rel_top + "/"
        kept = []
        for d in sorted(dirs):
            full = here / d
            if spec.match_file(prefix + d + "/") or (full / VENV_MARK).is_file():
                continue
            if full.is_symlink():
                raise Invalid(
                    f"code {root}: {prefix + d} is a link to a directory; list it in "
                    f"{IGNORE_FILE} or replace it with the files"
                )
            kept.append(d)
        dirs[:] = kept
        for name in sorted(files):
            rel = prefix + name
            if spec.match_file(rel):
                continue
            entries.append(_entry(root, here / name, rel))
    entries.sort(key=lambda e: e.path)
    return entries


def _entry(root: Path, path: Path, rel: str) -> _Entry:
    source = path
    if path.is_symlink():
        source = path.resolve()
        if not source.is_relative_to(root):
            raise Invalid(
                f"code {root}: {rel} links outside the directory (to {source}); copy the "
                f"file in or list it in {IGNORE_FILE}"
            )
    try:
        st = os.stat(source)
    except OSError as e:
        raise Invalid(f"code {root}: cannot read {rel}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise Invalid(f"code {root}: {rel} is not a regular file; list it in {IGNORE_FILE}")
    if not os.access(source, os.R_OK):
        raise Invalid(f"code {root}: cannot read {rel}: permission denied")
    return _Entry(rel, source, st.st_size, bool(st.st_mode & stat.S_IXUSR), st.st_mtime_ns)


def _unreadable(root: Path) -> Callable[[OSError], None]:
    def fail(e: OSError) -> None:
        raise Invalid(f"code {root}: cannot read {e.filename}: {e.strerror}")

    return fail


def _check_bounds(what: str, files: list[tuple[str, int]], max_bytes: int, max_files: int) -> None:
    """Refuse ``files`` (path, size) over the bounds, naming the largest."""
    size = sum(n for _, n in files)
    if size <= max_bytes and len(files) <= max_files:
        return
    largest = sorted(files, key=lambda f: (-f[1], f[0]))[:LARGEST_SHOWN]
    shown = ", ".join(f"{path} ({human_size(n)})" for path, n in largest)
    over = (
        f"over code_max_bytes {human_size(max_bytes)}"
        if size > max_bytes
        else f"over code_max_files {max_files:,}"
    )
    raise SnapshotTooLarge(
        f"{what} is {human_size(size)} in {len(files):,} files, {over}; its largest: "
        f"{shown}. List what need not ship in {IGNORE_FILE} (gitignore syntax)"
    )


def human_size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
