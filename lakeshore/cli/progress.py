"""Progress of a long wait, on stderr: one line redrawn in place on a terminal, plain lines
otherwise.

stdout stays the command's answer (a table, or ``-o json``), so a script that reads it never
sees progress; a log of stderr gets one readable line per change, never a carriage return.
"""

from __future__ import annotations

import sys
from types import TracebackType

import click

#: Cells of the bar drawn before a counted line on a terminal.
BAR_WIDTH = 20
#: Erase from the cursor to the end of the line: a shorter line leaves no tail behind.
_ERASE_EOL = "\x1b[K"


def stderr_is_tty() -> bool:
    """Whether stderr is a terminal (click's runner and pipes are not)."""
    return sys.stderr.isatty()


class Progress:
    """A status line on stderr, shown each time its text changes.

    On a terminal the line is redrawn in place, after a bar when the wait counts things
    (``[########            ] 2/5 registered (prep-00, prep-01)``); elsewhere each new text
    is a line of its own (``2/5 registered (prep-00, prep-01)``). Use it as a context manager,
    so the redrawn line is ended before whatever follows it (an ``error:`` line included).

    Args:
        tty: redraw in place; ``None`` (the default) asks whether stderr is a terminal.
    """

    def __init__(self, *, tty: bool | None = None) -> None:
        self.tty = stderr_is_tty() if tty is None else tty
        self._last: str | None = None
        self._open = False

    def show(self, text: str, *, done: int | None = None, total: int | None = None) -> None:
        """Show ``text``, unless it is the text already shown.

        Args:
            done, total: how far the wait is; on a terminal they draw the bar.
        """
        if text == self._last:
            return
        self._last = text
        if not self.tty:
            click.echo(text, err=True)
            return
        bar = f"{_bar(done, total)} " if done is not None and total else ""
        # color=True: the erase code goes out even where click would strip it.
        click.echo(f"\r{bar}{text}{_ERASE_EOL}", err=True, nl=False, color=True)
        self._open = True

    def count(self, verb: str, done: list[str], total: int) -> None:
        """Show ``len(done)/total VERB (names…)``: ``2/5 registered (prep-00, prep-01)``."""
        names = f" ({', '.join(done)})" if done else ""
        self.show(f"{len(done)}/{total} {verb}{names}", done=len(done), total=total)

    def close(self) -> None:
        """End a line redrawn in place; plain lines are ended already."""
        if self._open:
            click.echo("", err=True)
            self._open = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _bar(done: int, total: int) -> str:
    filled = min(BAR_WIDTH, BAR_WIDTH * done // total)
    return "[" + "#" * filled + " " * (BAR_WIDTH - filled) + "]"


__all__ = ["BAR_WIDTH", "Progress", "stderr_is_tty"]
