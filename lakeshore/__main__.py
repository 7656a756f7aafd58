"""``python -m lakeshore …``: the same as the ``lakeshore`` command (how the local provider
starts daemons: ``python -m lakeshore daemon run …`` with the server's own interpreter)."""

from lakeshore.cli.main import main

if __name__ == "__main__":
    main()
