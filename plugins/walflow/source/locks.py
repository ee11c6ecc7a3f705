"""Session advisory locks on the source database: one walflow consumer per slot, and a connector's lake apply and
lake maintenance never at the same time. A lock goes with its session, so a task that dies releases it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from walflow.config.connector import ConnectorConfig
from walflow.errors import ConcurrentRunError
from walflow.source.connection import connect

log = logging.getLogger(__name__)


def advisory_lock_key(slot: str) -> str:
    return f"walflow:{slot}"


def try_lock_slot(conn: psycopg.Connection, config: ConnectorConfig) -> None:
    """Take the session advisory lock that makes this process the slot's only walflow consumer."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (advisory_lock_key(config.slot_name),))
        row = cur.fetchone()
    if not row or not row[0]:
        raise ConcurrentRunError(
            f"another walflow task is already streaming slot {config.slot_name!r} of connector {config.name!r}; "
            "one consumer per slot. This run stops without reading anything; the next scheduled run continues."
        )


def release_slot_lock(conn: psycopg.Connection) -> None:
    """Release the slot's advisory lock before closing: the server frees a closed session's locks only when its
    backend has exited, so a run started right after this one (a stream after a failed setup, a retry) could
    otherwise still find the slot taken."""
    if conn.closed or conn.broken:
        return
    try:
        conn.execute("SELECT pg_advisory_unlock_all()")
    except psycopg.Error:
        pass  # the session ends anyway


def lake_lock_key(connector: str) -> str:
    return f"walflow:lake:{connector}"


@contextmanager
def lake_lock(conninfo: str, connector: str, wait_seconds: float, poll_seconds: float = 5.0) -> Iterator[bool]:
    """Hold the connector's lake lock (a session advisory lock on the source database) while the block runs, so
    that its lake apply and its lake maintenance never overlap: maintenance commits rewrites that must not race a
    MERGE, and expires snapshots a running apply may still read.

    Yields True once the lock is held, or False when another task held it for ``wait_seconds`` (the block must
    then leave the lake alone). The lock goes with the session: a task that dies releases it.
    """
    with connect(conninfo, application_name="walflow-lake-lock") as conn:
        deadline = time.monotonic() + wait_seconds
        key = lake_lock_key(connector)
        while True:
            row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (key,)).fetchone()
            if row and row[0]:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                yield False
                return
            time.sleep(min(poll_seconds, left))
        try:
            yield True
        finally:
            try:
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))
            except psycopg.Error:
                pass  # the session is gone, and its lock with it
