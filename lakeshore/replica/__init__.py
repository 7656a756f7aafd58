"""Replication of the control plane: the projector of the state stream, and leadership."""
