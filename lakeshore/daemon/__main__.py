"""``python -m lakeshore.daemon [OPTIONS]``: the same as ``lakeshore daemon run``."""

from lakeshore.cli.daemon_run import run

if __name__ == "__main__":
    run(prog_name="python -m lakeshore.daemon")
