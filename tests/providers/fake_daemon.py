"""Stands in for ``lakeshore daemon run`` in the LocalProvider tests.

``fake_daemon.py PORT MODE <daemon flags…>``: once its signal handling is set up, it sends
its daemon flags as one JSON line to 127.0.0.1:PORT (the test's readiness signal), then

- ``drain``: exits 0 on SIGTERM, as a daemon does after draining;
- ``deaf``: ignores SIGTERM (only SIGKILL ends it);
- ``crash``: writes a reason on stderr and exits 3.
"""

import json
import signal
import socket
import sys

port, mode, flags = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
if mode == "drain":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
elif mode == "deaf":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with socket.create_connection(("127.0.0.1", port)) as s:
    s.sendall(json.dumps(flags).encode() + b"\n")
if mode == "crash":
    print("boom: cannot reach nats", file=sys.stderr)
    sys.exit(3)
while True:
    signal.pause()
