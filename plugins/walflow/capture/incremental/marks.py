"""How a chunk's window is marked in the stream: with watermarks, or (read-only) by WAL positions.

A connector that may write (the usual case) marks each chunk's window with two logical decoding messages, the low
and the high watermark, and the window closes when the stream reads the high one. A ``read.only`` connector (a hot
standby, or a role that may not write) writes nothing: the chunk's SELECT also reads the end of the WAL after its
snapshot, and the window closes when the stream reaches the first commit at or after that position. The rest of the
incremental snapshot is the same either way; :func:`window_marks` picks the strategy once, from the configuration.
"""

from __future__ import annotations

from typing import Protocol

import psycopg

from walflow.config.connector import ConnectorConfig

#: the end of the WAL, read after the statement's snapshot: replayed WAL on a hot standby, inserted WAL on a primary
#: (a transaction is visible only once its commit record is in the WAL), as an integer LSN
WAL_END_AFTER_SNAPSHOT = (
    "((CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END) - '0/0')::int8"
)


class WindowMarks(Protocol):
    """How windows are marked and closed (see the module's docstring)."""

    #: what the chunk's snapshot statement returns as the end of the WAL (``NULL`` when windows close at watermarks)
    wal_end_sql: str
    #: whether windows close at WAL positions (the dispatcher checks them at each BEGIN) rather than at watermarks
    closes_at_positions: bool

    def queue(self, conn: psycopg.Connection, prefix: str, low: str | None, high: str | None) -> None:
        """Queue the low and high marks on ``conn``, inside a pipeline the caller holds open."""

    def write(self, conn: psycopg.Connection, prefix: str, low: str | None, high: str | None) -> None:
        """Write the low and high marks on ``conn``, as one pipeline of their own."""

    def flush(self, conn: psycopg.Connection, prefix: str, content: str) -> None:
        """After a round's chunks: make their marks readable by logical decoding."""


class Watermarks:
    """Windows between a low and a high watermark (logical decoding messages the connector writes)."""

    wal_end_sql = "NULL::int8"
    closes_at_positions = False

    def queue(self, conn: psycopg.Connection, prefix: str, low: str | None, high: str | None) -> None:
        # the low watermark outside any transaction, the high one in a transaction of its own
        if low is not None:
            conn.execute("SELECT pg_logical_emit_message(false, %s, %s)", (prefix, low))
        if high is not None:
            conn.execute("BEGIN")
            conn.execute("SET LOCAL synchronous_commit TO off")
            conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (prefix, high))
            conn.execute("COMMIT")

    def write(self, conn: psycopg.Connection, prefix: str, low: str | None, high: str | None) -> None:
        with conn.pipeline():
            self.queue(conn, prefix, low, high)

    def flush(self, conn: psycopg.Connection, prefix: str, content: str) -> None:
        # logical decoding reads only flushed WAL (and the batch streams up to the flushed end), and the chunks'
        # watermarks are written without waiting for it: one transactional message whose commit waits for the local
        # flush, whatever synchronous_commit the database sets, makes them readable (a crash before it loses nothing:
        # a chunk whose high watermark never shows is selected again by the next batch). Also after a chunk that
        # found no rows: its high watermark must be read for the table to count as done.
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit TO local")
            conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (prefix, content))


class WalPositions:
    """Read-only windows: nothing is written; each closes at the end of the WAL its chunk's snapshot saw."""

    wal_end_sql = WAL_END_AFTER_SNAPSHOT
    closes_at_positions = True

    def queue(self, conn: psycopg.Connection, prefix: str, low: str | None, high: str | None) -> None:
        return None

    def write(self, conn: psycopg.Connection, prefix: str, low: str | None, high: str | None) -> None:
        return None

    def flush(self, conn: psycopg.Connection, prefix: str, content: str) -> None:
        return None


def window_marks(config: ConnectorConfig) -> WindowMarks:
    """The strategy ``config`` asks for: :class:`WalPositions` with ``read.only``, else :class:`Watermarks`."""
    return WalPositions() if config.read_only else Watermarks()
