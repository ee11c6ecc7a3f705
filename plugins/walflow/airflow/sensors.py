"""Sensors: poke first, defer to a trigger only when they must wait."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException
from walflow.airflow.hooks import WalflowPostgresHook
from walflow.airflow.triggers import TERMINAL, WalflowSnapshotTrigger
from walflow.config import resolve
from walflow.incremental import signal_status
from walflow.source import connect

if TYPE_CHECKING:
    from airflow.sdk import Context


class WalflowSnapshotSensor(BaseSensorOperator):
    """Wait until the stream has finished the incremental snapshot started by a signal; fail if it stopped.

    Each poke logs the snapshot's progress (tables left, chunks, rows).

    :param connector: the connector's name or YAML path.
    :param signal_id: the ``execute-snapshot`` signal's id (usually pulled from the signal task's XCom).
    :param overrides: Debezium keys that replace the YAML's values.
    :param postgres_conn_id: overrides ``walflow.postgres.conn.id``.
    :param deferrable: wait in the triggerer instead of occupying a worker slot.
    """

    template_fields: Sequence[str] = ("connector", "signal_id", "overrides", "postgres_conn_id")

    def __init__(
        self,
        *,
        connector: str,
        signal_id: str,
        overrides: dict[str, Any] | None = None,
        postgres_conn_id: str | None = None,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.connector = connector
        self.signal_id = signal_id
        self.overrides = overrides
        self.postgres_conn_id = postgres_conn_id
        self.deferrable = deferrable

    def _status(self) -> dict[str, Any] | None:
        config = resolve(self.connector, self.overrides)
        hook = WalflowPostgresHook(postgres_conn_id=self.postgres_conn_id or config.walflow_postgres_conn_id)
        with connect(hook.get_conninfo(**config.conninfo_options()), application_name=f"walflow:{config.name}:sensor") as conn:
            return signal_status(conn, config, self.signal_id)

    def _check(self, status: dict[str, Any] | None) -> bool:
        if not status:
            self.log.info("incremental snapshot %s: not picked up by the stream yet", self.signal_id)
            return False
        state = status.get("status")
        self.log.info(
            "incremental snapshot %s: %s, tables left %s, %s chunk(s), %s row(s)",
            self.signal_id,
            state,
            status.get("tables_left", []),
            status.get("chunks", 0),
            status.get("rows", 0),
        )
        if state == "completed":
            return True
        if state in ("stopped", "failed"):
            raise AirflowException(f"incremental snapshot {self.signal_id} {state}: {status.get('error') or status}")
        return False

    def poke(self, context: Context) -> bool:
        return self._check(self._status())

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        config = resolve(self.connector, self.overrides)
        self.defer(
            trigger=WalflowSnapshotTrigger(
                signal_id=self.signal_id,
                connector=config.name,
                state_table=config.state_table,
                postgres_conn_id=self.postgres_conn_id or config.walflow_postgres_conn_id,
                conninfo_options=config.conninfo_options(),
                poll_interval=float(self.poke_interval),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event.get("status") not in TERMINAL or not self._check(event):
            raise AirflowException(f"incremental snapshot {self.signal_id} ended unexpectedly: {event}")
