"""Triggers: asynchronous waits that run in Airflow's triggerer, never blocking its event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async
from psycopg import sql

from walflow.source.connection import split_statements
from walflow.source.health import PENDING_WAL_SQL
from walflow.source.queries import AsyncCursor
from walflow.source.signals import SIGNAL_STATUS_SQL, signal_key

TERMINAL = ("completed", "stopped", "failed")


class WalflowSnapshotTrigger(BaseTrigger):
    """Wait until the stream task has finished (or given up) an ad-hoc incremental snapshot.

    Fires one event: the snapshot's state once it is ``completed``, ``stopped`` or ``failed``, or
    ``{"status": "error", "error": ...}`` when the state cannot be read for a reason waiting will not change (a
    missing state table or privilege). A database that cannot be reached is tried again at the next poll, with the
    Airflow Connection read again.

    :param signal_id: the id of the ``execute-snapshot`` signal.
    :param connector: the connector's name (the state table's ``connector`` column).
    :param state_table: ``(schema, table)`` of walflow's state table.
    :param postgres_conn_id: the Airflow Connection of the source database.
    :param conninfo_options: libpq options added to the Connection (TLS settings of the connector).
    :param poll_interval: seconds between two reads of the state.
    :param initial_statements: the connector's ``database.initial.statements``, run on each connection.
    """

    def __init__(
        self,
        signal_id: str,
        connector: str,
        state_table: tuple[str, str] | list[str],
        postgres_conn_id: str,
        conninfo_options: dict[str, str] | None = None,
        poll_interval: float = 10.0,
        initial_statements: str | None = None,
    ) -> None:
        super().__init__()
        self.signal_id = signal_id
        self.connector = connector
        self.state_table = tuple(state_table)
        self.postgres_conn_id = postgres_conn_id
        self.conninfo_options = conninfo_options or {}
        self.poll_interval = poll_interval
        self.initial_statements = initial_statements

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "walflow.airflow.triggers.WalflowSnapshotTrigger",
            {
                "signal_id": self.signal_id,
                "connector": self.connector,
                "state_table": list(self.state_table),
                "postgres_conn_id": self.postgres_conn_id,
                "conninfo_options": self.conninfo_options,
                "poll_interval": self.poll_interval,
                "initial_statements": self.initial_statements,
            },
        )

    async def _conninfo(self) -> str:
        from walflow.airflow.hooks import WalflowPostgresHook

        hook = WalflowPostgresHook(postgres_conn_id=self.postgres_conn_id)
        return await sync_to_async(hook.get_conninfo)(**self.conninfo_options)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        conninfo: str | None = None
        query = sql.SQL(SIGNAL_STATUS_SQL).format(sql.Identifier(*self.state_table))
        last: dict[str, Any] | None = None
        while True:
            try:
                if conninfo is None:
                    conninfo = await self._conninfo()
                async with await psycopg.AsyncConnection.connect(
                    conninfo, autocommit=True, cursor_factory=AsyncCursor
                ) as conn:
                    for statement in split_statements(self.initial_statements):
                        await conn.execute(statement.encode())
                    cur = await conn.execute(query, (self.connector, signal_key(self.signal_id)))
                    row = await cur.fetchone()
            except psycopg.OperationalError as exc:
                # the server restarting, the network, a password being rotated: worth another try, with the
                # Connection read again (it may have been corrected meanwhile)
                self.log.warning(
                    "cannot reach the database to read the snapshot's state (%s); retrying", str(exc).strip()
                )
                conninfo, row = None, None
            except psycopg.Error as exc:
                # a missing state table, a missing privilege, a failing initial statement: waiting cannot fix it
                table = ".".join(self.state_table)
                yield TriggerEvent(
                    {
                        "signal_id": self.signal_id,
                        "status": "error",
                        "error": (
                            f"cannot read the state of incremental snapshot {self.signal_id} from {table}: "
                            f"{str(exc).strip()}. Check that walflow.state.table names the connector's state table, "
                            f"that the Connection's user may read it, and database.initial.statements"
                        ),
                    }
                )
                return
            status = row[0] if row else None
            if status != last:
                self.log.info(
                    "incremental snapshot %s: %s", self.signal_id, status or "not picked up by the stream yet"
                )
                last = status
            if status and status.get("status") in TERMINAL:
                yield TriggerEvent({"signal_id": self.signal_id, **status})
                return
            await asyncio.sleep(self.poll_interval)


class WalflowPendingWalTrigger(BaseTrigger):
    """Wait until a replication slot has at least ``min_bytes`` of unconfirmed WAL, or until ``deadline``.

    Fires one event, ``{"status": "threshold" | "deadline" | "error", "pending_wal_bytes": n, ...}``. The query is
    :data:`walflow.source.health.PENDING_WAL_SQL` run on a psycopg ``AsyncConnection``; the only blocking call (reading
    the Airflow Connection) runs in a thread, so the triggerer's event loop never waits on I/O. A connection that
    drops is reopened at the next poll; a slot that does not exist is an ``error`` event, since waiting cannot
    make it appear.

    :param slot_name: the replication slot.
    :param min_bytes: fire once this many bytes of WAL are pending.
    :param postgres_conn_id: the Airflow Connection of the source database (its secrets never enter the
        trigger's serialized arguments; they are read when the trigger runs).
    :param conninfo_options: libpq options added to the Connection (the connector's TLS settings).
    :param deadline: epoch seconds after which the trigger fires anyway (``None``: wait for the threshold only).
        An absolute time, so a trigger restarted on another triggerer keeps the same end.
    :param poll_interval: seconds between two measurements.
    :param initial_statements: the connector's ``database.initial.statements``, run on the connection.
    """

    def __init__(
        self,
        slot_name: str,
        min_bytes: int,
        postgres_conn_id: str,
        conninfo_options: dict[str, str] | None = None,
        deadline: float | None = None,
        poll_interval: float = 5.0,
        initial_statements: str | None = None,
    ) -> None:
        super().__init__()
        self.slot_name = slot_name
        self.min_bytes = int(min_bytes)
        self.postgres_conn_id = postgres_conn_id
        self.conninfo_options = dict(conninfo_options or {})
        self.deadline = deadline
        self.poll_interval = float(poll_interval)
        self.initial_statements = initial_statements

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "walflow.airflow.triggers.WalflowPendingWalTrigger",
            {
                "slot_name": self.slot_name,
                "min_bytes": self.min_bytes,
                "postgres_conn_id": self.postgres_conn_id,
                "conninfo_options": self.conninfo_options,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "initial_statements": self.initial_statements,
            },
        )

    async def _conninfo(self) -> str:
        from walflow.airflow.hooks import WalflowPostgresHook

        hook = WalflowPostgresHook(postgres_conn_id=self.postgres_conn_id)
        return await sync_to_async(hook.get_conninfo)(**self.conninfo_options)

    async def _connect(self, conninfo: str) -> psycopg.AsyncConnection:
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, application_name="walflow:wal-trigger")
        for statement in split_statements(self.initial_statements):
            await conn.execute(statement.encode())
        return conn

    def _event(self, status: str, pending: int | None, **extra: Any) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "slot": self.slot_name,
                "pending_wal_bytes": pending,
                "min_bytes": self.min_bytes,
                **extra,
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        conninfo = await self._conninfo()
        conn: psycopg.AsyncConnection | None = None
        pending: int | None = None
        try:
            while True:
                try:
                    if conn is None or conn.closed:
                        conn = await self._connect(conninfo)
                    cur = await conn.execute(PENDING_WAL_SQL, (self.slot_name,))
                    row = await cur.fetchone()
                    if row is None:
                        yield self._event(
                            "error",
                            None,
                            message=(
                                f"replication slot {self.slot_name!r} does not exist; run the connector's setup DAG"
                            ),
                        )
                        return
                    pending = int(row[0] or 0)
                except psycopg.Error as exc:
                    # a restart or failover of the server: measure again at the next poll
                    self.log.warning(
                        "cannot measure the pending WAL of slot %s yet (%s); retrying", self.slot_name, str(exc).strip()
                    )
                    if conn is not None:
                        await conn.close()
                    conn = None
                if pending is not None and pending >= self.min_bytes:
                    yield self._event("threshold", pending)
                    return
                if self.deadline is not None and time.time() >= self.deadline:
                    yield self._event("deadline", pending)
                    return
                wait = self.poll_interval
                if self.deadline is not None:
                    wait = max(0.0, min(wait, self.deadline - time.time()))
                await asyncio.sleep(wait)
        finally:
            if conn is not None:
                await conn.close()
