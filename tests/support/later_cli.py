"""`python -m tests.support.later_cli SECONDS ARGS...`: the `idemclient` command, run as a
real process whose clock reads SECONDS ahead of the system's (its `SystemClock`s start
with that offset). A test that runs the command again "later" moves its in-process
server's clock on as far, so that time passes for both sides without anyone sleeping:
a rerun five minutes on, as an operator would make it, in milliseconds."""

from __future__ import annotations

import sys

from idemclient import _clock
from idemclient.cli import main

_offset = float(sys.argv.pop(1))
_plain_init = _clock.SystemClock.__init__


def _later(self: _clock.SystemClock) -> None:
    _plain_init(self)
    self.advance(_offset)


_clock.SystemClock.__init__ = _later  # type: ignore[method-assign]  # this process only
main()
