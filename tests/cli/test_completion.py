"""``lakeshore completion bash|zsh|fish`` and the completion requests its scripts make."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lakeshore.cli.completion import SHELLS
from lakeshore.cli.exits import OK, USAGE
from lakeshore.cli.main import lakeshore


@pytest.mark.parametrize("shell", SHELLS)
def test_each_script_is_clicks_own_for_lakeshore(shell: str):
    result = CliRunner().invoke(lakeshore, ["completion", shell], prog_name="lakeshore")
    assert result.exit_code == OK, result.output
    assert "_LAKESHORE_COMPLETE" in result.stdout
    sourced = CliRunner(env={"_LAKESHORE_COMPLETE": f"{shell}_source"}).invoke(
        lakeshore, [], prog_name="lakeshore"
    )
    assert result.stdout.strip() == sourced.stdout.strip()


def test_an_unknown_shell_is_a_usage_error():
    result = CliRunner().invoke(lakeshore, ["completion", "tcsh"], prog_name="lakeshore")
    assert result.exit_code == USAGE
    assert "bash" in result.stderr and "fish" in result.stderr


def complete(words: str, cword: int) -> list[str]:
    env = {"_LAKESHORE_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    result = CliRunner(env=env).invoke(lakeshore, [], prog_name="lakeshore")
    assert result.exit_code == OK, result.output
    return result.stdout.splitlines()


def test_a_completion_request_answers_groups_and_verbs():
    assert complete("lakeshore que", 1) == ["plain,queues"]
    assert complete("lakeshore queues st", 2) == ["plain,stats"]
    assert complete("lakeshore completion ", 2) == [f"plain,{s}" for s in SHELLS]


def test_bash_completes_with_the_printed_script():
    bash = shutil.which("bash")
    assert bash is not None, "bash is needed to run the completion script"
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "lakeshore").exists()
    probe = (
        'eval "$(lakeshore completion bash)"\n'
        "COMP_WORDS=(lakeshore que); COMP_CWORD=1\n"
        "_lakeshore_completion lakeshore\n"
        'echo "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [bash, "--norc", "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    assert done.stdout.split() == ["queues"]
