"""Harvester's Prefect collection (the ``prefect.collections`` entry point in pyproject.toml): a module Prefect's own
processes in harvester's environment import, ``prefect worker start`` before it installs its signal handlers.

A worker started as a script's background job (``prefect worker start --pool harvester &`` in a script, as
docs/operations.md writes it, or ``nohup ... &``) starts with SIGINT ignored: a shell without job control ignores it
for every ``&`` command, and Python then keeps it ignored rather than raising ``KeyboardInterrupt`` on it. Prefect's
worker (3.9) turns a SIGTERM into a SIGINT to itself, after putting back the SIGINT handler it found, which was that
ignore: the SIGTERM (``systemctl stop``, ``kill``) did nothing. Its run, told by the same group-wide SIGTERM, ended
Crashed, and the worker went on (it took the run's retry) until a second SIGTERM, which Prefect turns into SIGKILL.
Here SIGINT gets the handler Python gives it when it is not ignored, so the first SIGTERM stops the worker as it
stops one started any other way (tests/flows/test_shutdown.py).

Imports nothing heavy: Prefect loads its collections while it starts.
"""

from __future__ import annotations

import signal
import threading


def restore_sigint() -> bool:
    """Give an inherited ignored SIGINT Python's own handler back; True when it was ignored. Only SIG_IGN is
    replaced: a handler set on purpose, or a process that takes SIGINT's default, is left as it is."""
    if threading.current_thread() is not threading.main_thread():  # signal.signal works on the main thread only
        return False
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        return False
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return True


restore_sigint()
