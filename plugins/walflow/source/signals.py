"""The signal table: how users and operators ask a connector's stream for incremental snapshots, and how they
read what became of their signal.

A signal is a row (id, type, data) inserted into the connector's ``signal.data.collection``; the stream task reads
it from the WAL like any change (:class:`walflow.capture.incremental.IncrementalSnapshots` acts on it) and records its
outcome in the state table under :func:`signal_key`. Signal text comes from whoever can write that table, so its
size and id are bounded and it is escaped before it reaches a log line.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

import orjson
import psycopg
from psycopg import sql

from walflow.config.connector import ConnectorConfig
from walflow.errors import SourceError
from walflow.source.connection import quote_table
from walflow.source.state import StateStore

MAX_SIGNAL_BYTES = 64 * 1024


MAX_SIGNAL_ID = 128


def signal_key(signal_id: str) -> str:
    """The state-table key under which the stream records what became of signal ``signal_id``."""
    return f"signal:{signal_id}"


class SignalError(ValueError):
    """A malformed signal: logged with its id and skipped, never stopping the stream."""


def first_line(exc: BaseException) -> str:
    """A server error's message without its LINE/HINT lines, for logs and the state table (escaped: it may quote
    a signal's text)."""
    text = str(exc).strip()
    return printable(text.splitlines()[0]) if text else type(exc).__name__


def printable(value: Any, limit: int = 2000) -> str:
    """Text a signal writer chose, safe for one log line: control and other non-printable characters escaped
    (``\\n``, ``\\x1b``), cut to ``limit`` characters."""
    text = str(value)
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text) - limit} more characters)"
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def send_signal(
    conn: psycopg.Connection, config: ConnectorConfig, kind: str, data: dict[str, Any], signal_id: str | None = None
) -> str:
    """Insert a signal row into the connector's signal table; the stream task acts on it. Returns its id."""
    if not config.signal_table:
        raise SourceError(
            f"connector {config.name!r} has no 'signal.data.collection'; set it (for example public.walflow_signal) "
            "and re-run the setup DAG, which creates the table and adds it to the publication"
        )
    signal_id = signal_id or uuid.uuid4().hex
    payload = orjson.dumps(data).decode()
    if len(payload) > MAX_SIGNAL_BYTES:
        raise SourceError(f"the signal's data is {len(payload)} bytes; signals are limited to {MAX_SIGNAL_BYTES}")
    conn.execute(
        sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, %s, %s)").format(quote_table(*config.signal_table)),
        (signal_id, kind, payload),
    )
    return signal_id


#: the state-table query of a signal's outcome (the asynchronous trigger runs it on its own connection)
SIGNAL_STATUS_SQL = "SELECT value FROM {} WHERE connector = %s AND key = %s"


def signal_status(conn: psycopg.Connection, config: ConnectorConfig, signal_id: str) -> dict[str, Any] | None:
    """What the stream task recorded about a signal: running, paused, completed, stopped or failed."""
    status = StateStore(conn, config.name, config.state_table).get(signal_key(signal_id))
    return cast("dict[str, Any] | None", status)
