"""Which lease and run owners are alive, judged by the PostgreSQL server for every machine (issue 32).

On one machine a process's PID says whether it runs (``owners.Liveness``). Workers on several machines share a
PostgreSQL frontier, where a PID says nothing: a worker of another machine resumed a live run, a cycle waited on
a finished worker of another machine for ever, a dead holder's hosts waited for its lease to lapse. Here each
process that writes to the frontier keeps one session of its own (``ProcessSession``, not one of the pool's),
named after its machine and PID (``session_name``); an owner that declares such a session
(``owners.SESSION_MARK``, what ``make_owner`` writes) is alive iff that session exists in ``pg_stat_activity``
(whatever machine it runs on), or it is a process of this machine that still runs (a process whose session the
server ended a moment ago is not judged dead while its PID lives). An owner that declares none (an older harvester
still at work during a rolling deploy) is judged by the PID rule on its own machine and not known elsewhere: its
leases lapse by time. A release asks the verdict again in its own transaction (``still_dead``). A killed
process's session ends with it (the kernel closes its socket): its leases go back at once. A frozen one
(SIGSTOP, a VM pause) keeps its session and so its leases until they lapse by time (``phases.leases``: it sends
nothing after that).

A session the server ends while its process lives (a restart, ``pg_terminate_backend``) is seen at once by a
thread waiting on its socket, which opens it again: ``ProcessSession.epoch`` moves on at the loss and at the
return, and the process's local lease deadlines are void until a renewal after the return confirms them
(``phases.leases.HostHolds``), since others may judge it dead meanwhile and take its hosts.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import psycopg

from harvester.owners import Liveness, declares_session, of_this_process, owner_process

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from harvester.frontier.base import Database, Transaction

logger = logging.getLogger(__name__)

LIVE_NAME = "harvester-live:"
"""The ``application_name`` prefix of a process's liveness session (then a digest of ``host:pid``)."""

WATCH_S = 30.0
"""The watcher pings its session at least this often (a socket that went silent without a close)."""

RECONNECT_S = 1.0


def session_name(host: str, pid: int) -> str:
    """The liveness session's name of the process ``pid`` of ``host``: a digest, as a host name may be longer
    than the 63 bytes of an ``application_name``."""
    return LIVE_NAME + hashlib.sha256(f"{host}:{pid}".encode()).hexdigest()[:32]


class ProcessSession:
    """This process's liveness session on one PostgreSQL database, kept for the life of the process (a run's
    owner outlives the store a task opened) and opened again whenever the server ends it."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._key = (os.getpid(), conninfo)
        self.name = session_name(socket.gethostname(), os.getpid())
        self.lost = 0
        """How many times the server ended this session while the process ran."""
        self.epoch = 0
        """Moves on when the session is lost and again when it is back: a local lease deadline granted in another
        epoch is void (``HostHolds``), one granted while it was away too."""
        self.up = True
        """The session is there now: others see this process alive."""
        self._conn = self._connect()
        threading.Thread(target=self._watch, name="harvester-liveness", daemon=True).start()

    def _connect(self) -> psycopg.Connection:
        conn = psycopg.connect(self._conninfo, autocommit=True, application_name=self.name)
        for setting in ("idle_session_timeout", "statement_timeout"):  # a server's default must not end it
            with contextlib.suppress(psycopg.Error):  # idle_session_timeout: PostgreSQL 14 and later only
                conn.execute(f"SET {setting} = 0")
        return conn

    def _watch(self) -> None:
        """Wait on the session's socket: the server writes to it only to end it. Then count the loss and open the
        session again (each second until the server answers)."""
        while True:
            conn = self._conn
            try:
                select.select([conn.fileno()], [], [], WATCH_S)
                conn.execute("SELECT 1")  # raises once the server has ended the session
                continue
            except (psycopg.Error, OSError, ValueError) as exc:
                self.up = False
                self.lost += 1
                self.epoch += 1
                logger.warning("this process's liveness session ended (%s): opening it again", exc)
            conn.close()
            while True:
                try:
                    self._conn = self._connect()
                    self.epoch += 1
                    self.up = True
                    break
                except psycopg.errors.InvalidCatalogName:  # the database was dropped: nothing left to be alive in
                    with _SESSIONS_LOCK:
                        if _SESSIONS.get(self._key) is self:
                            del _SESSIONS[self._key]
                    return
                except psycopg.Error:
                    time.sleep(RECONNECT_S)


_SESSIONS: dict[tuple[int, str], ProcessSession] = {}
_SESSIONS_LOCK = threading.Lock()
"""(PID, conninfo) -> this process's session there: one per process and database however many stores it opens
(a forked child opens its own)."""


def process_session(conninfo: str) -> ProcessSession:
    key = (os.getpid(), conninfo)
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            session = _SESSIONS[key] = ProcessSession(conninfo)  # keyed as ``ProcessSession._key``
        return session


class PostgresLiveness(Liveness):
    """The rule of a PostgreSQL frontier: a process is alive iff its session is there (or it runs here)."""

    def __init__(self, tx: Callable[..., AbstractContextManager[Transaction]], session: ProcessSession | None) -> None:
        self._tx = tx
        self.session = session
        """This process's own session (None: a reader, which holds no lease and runs nothing)."""

    @property
    def losses(self) -> int:
        return 0 if self.session is None else self.session.epoch

    @property
    def present(self) -> bool:
        return self.session is None or self.session.up

    def process_is_live(self, owner: str) -> bool | None:
        """By its session when ``owner`` declares one (``owners.declares_session``); else (an older harvester's
        owner, during a rolling deploy) by this machine's PIDs, and not known for another machine's."""
        where = owner_process(owner)
        if where is None or not declares_session(owner):
            return super().process_is_live(owner)
        return bool(self._present([session_name(*where)])) or super().process_is_live(owner) is True

    def dead_of(self, owners: Iterable[str]) -> list[str]:
        """One query for them all: a worker asks this of every holder of its site's hosts on each look. Only an
        owner that declares a session is judged by it: an older harvester's owner of another machine, still
        sending until its own deadline, is not known dead (its leases lapse by time)."""
        others = {owner: where for owner in owners if not of_this_process(owner) and declares_session(owner)
                  and (where := owner_process(owner)) is not None}
        present = self._present([session_name(*where) for where in others.values()]) if others else set()
        return [owner for owner in owners if (
            self.is_dead(owner) if owner not in others
            else session_name(*others[owner]) not in present and Liveness.process_is_live(self, owner) is not True)]

    def still_dead(self, conn: Connection, owner: str) -> bool:
        """Still no session of ``owner``, asked in the transaction that releases its leases once its hosts' rows
        are locked there. Asked in a transaction of its own (``dead_of``), the verdict went stale: a holder whose
        session the server ended could open it again and renew its hosts in between, then lose them while it went
        on sending. Now a renewal after this look waits on the locks and finds the hosts gone (it stops); one
        before it is seen alive here (PostgreSQL reads ``pg_stat_activity`` once per transaction: after the lock)."""
        where = owner_process(owner)
        if where is None or of_this_process(owner) or not declares_session(owner):
            return True
        conn.exec_driver_sql("SELECT 1 FROM hosts WHERE lease_owner = %s FOR UPDATE", (owner,))
        return conn.exec_driver_sql(
            "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = %s)", (session_name(*where),),
        ).scalar_one() is True

    def _present(self, names: list[str]) -> set[str]:
        with self._tx(write=False) as tx:
            return {str(name) for name in tx.conn.exec_driver_sql(
                "SELECT DISTINCT application_name FROM pg_stat_activity WHERE application_name = ANY(%s)", (names,),
            ).scalars()}


def postgres_liveness(db: Database, *, reader: bool) -> PostgresLiveness:
    """The liveness rule of ``db``, with this process's session opened there unless ``reader``."""
    conninfo = db.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    return PostgresLiveness(db.tx, None if reader else process_session(conninfo))
