"""Stands in for ``lakeshore daemon run`` in the LocalProvider tests.

``fake_daemon.py PORT MODE <daemon flags…>``: once its signal handling is set up, it sends
its daemon flags and the NATS credential and CA it finds in its environment as one JSON
line ``{"argv": [...], "env": {...}}`` to 127.0.0.1:PORT (the test's readiness signal), then

- ``drain``: exits 0 on SIGTERM, as a daemon does after draining;
- ``deaf``: ignores SIGTERM (only SIGKILL ends it);
- ``crash``: writes a reason on stderr and exits 3.
"""

import json
import os
import signal
import socket
import sys

#: lakeshore.providers.local's CREDENTIAL_ENV and CA_ENV (this script imports nothing of it).
NATS_ENV = ("LAKESHORE_NATS_CREDENTIAL", "LAKESHORE_NATS_CA")

port, mode, flags = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
if mode == "drain":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
elif mode == "deaf":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with socket.create_connection(("127.0.0.1", port)) as s:
    env = {k: os.environ[k] for k in NATS_ENV if k in os.environ}
    s.sendall(json.dumps({"argv": flags, "env": env}).encode() + b"\n")
if mode == "crash":
    print("boom: cannot reach nats", file=sys.stderr)
    sys.exit(3)
while True:
    signal.pause()
