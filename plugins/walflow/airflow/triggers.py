"""Triggers: asynchronous waits that run in Airflow's triggerer, never blocking its event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from asgiref.sync import sync_to_async
from psycopg import sql

from airflow.triggers.base import BaseTrigger, TriggerEvent

TERMINAL = ("completed", "stopped", "failed")


class WalflowSnapshotTrigger(BaseTrigger):
    """Wait until the stream task has finished (or given up) an ad-hoc incremental snapshot.

    :param signal_id: the id of the ``execute-snapshot`` signal.
    :param connector: the connector's name (the state table's ``connector`` column).
    :param state_table: ``(schema, table)`` of walflow's state table.
    :param postgres_conn_id: the Airflow Connection of the source database.
    :param conninfo_options: libpq options added to the Connection (TLS settings of the connector).
    :param poll_interval: seconds between two reads of the state.
    """

    def __init__(
        self,
        signal_id: str,
        connector: str,
        state_table: tuple[str, str] | list[str],
        postgres_conn_id: str,
        conninfo_options: dict[str, str] | None = None,
        poll_interval: float = 10.0,
    ) -> None:
        super().__init__()
        self.signal_id = signal_id
        self.connector = connector
        self.state_table = tuple(state_table)
        self.postgres_conn_id = postgres_conn_id
        self.conninfo_options = conninfo_options or {}
        self.poll_interval = poll_interval

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
            },
        )

    async def _conninfo(self) -> str:
        from walflow.airflow.hooks import WalflowPostgresHook

        hook = WalflowPostgresHook(postgres_conn_id=self.postgres_conn_id)
        return await sync_to_async(hook.get_conninfo)(**self.conninfo_options)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        conninfo = await self._conninfo()
        query = sql.SQL("SELECT value FROM {}.{} WHERE connector = %s AND key = %s").format(
            sql.Identifier(self.state_table[0]), sql.Identifier(self.state_table[1])
        )
        last: dict[str, Any] | None = None
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                    cur = await conn.execute(query, (self.connector, f"signal:{self.signal_id}"))
                    row = await cur.fetchone()
            except psycopg.Error as exc:
                self.log.warning("cannot read snapshot state yet (%s); retrying", str(exc).strip())
                row = None
            status = row[0] if row else None
            if status != last:
                self.log.info("incremental snapshot %s: %s", self.signal_id, status or "not picked up by the stream yet")
                last = status
            if status and status.get("status") in TERMINAL:
                yield TriggerEvent({"signal_id": self.signal_id, **status})
                return
            await asyncio.sleep(self.poll_interval)
