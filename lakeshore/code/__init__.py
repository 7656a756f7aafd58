"""Code that reaches the daemon running it (spec/code.md): snapshots of a directory."""

from lakeshore.code.snapshot import Snapshot, SnapshotTooLarge, pack, unpack, verify

__all__ = ["Snapshot", "SnapshotTooLarge", "pack", "unpack", "verify"]
