"""Sensors: poke first, defer to a trigger only when they must wait."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from croniter import CroniterBadCronError, croniter

from walflow.airflow.hooks import WalflowPostgresHook
from walflow.airflow.triggers import TERMINAL, WalflowPendingWalTrigger, WalflowSnapshotTrigger
from walflow.config.connector import ConnectorConfig
from walflow.config.files import resolve
from walflow.source.connection import connect
from walflow.source.health import pending_wal_bytes
from walflow.source.signals import signal_status

if TYPE_CHECKING:
    from airflow.sdk import Context


def next_stream_run(config: ConnectorConfig, now: datetime | None = None) -> str:
    """Which run of the connector's stream DAG will pick a signal up, and when, for the snapshot sensor's log."""
    dag_id = f"{config.name}__stream"
    if config.walflow_stream_trigger_wal_bytes:
        return f"the next run of {dag_id} (it starts as soon as WAL is pending)"
    schedule = config.walflow_schedule
    if not schedule:
        return f"a run of {dag_id} (it has no schedule: trigger it)"
    try:
        upcoming = croniter(schedule, now or datetime.now(timezone.utc)).get_next(datetime)
    except (ValueError, KeyError, CroniterBadCronError):
        return f"the next run of {dag_id} (schedule {schedule!r})"
    return f"the next run of {dag_id} (schedule {schedule!r}, next at {upcoming:%H:%M:%S} UTC, if it is not paused)"


class WalflowSnapshotSensor(BaseSensorOperator):
    """Wait until the stream has finished the incremental snapshot started by a signal; fail if it stopped.

    Each poke logs the snapshot's progress (tables left, chunks, rows).

    :param connector: the connector's name or YAML path.
    :param signal_id: the ``execute-snapshot`` signal's id (usually pulled from the signal task's XCom).
    :param overrides: Debezium keys that replace the YAML's values.
    :param postgres_conn_id: overrides ``walflow.postgres.conn.id``.
    :param deferrable: wait in the triggerer instead of occupying a worker slot (default: Airflow's
        ``[operators] default_deferrable``, as in Airflow's own providers).
    """

    template_fields: Sequence[str] = ("connector", "signal_id", "overrides", "postgres_conn_id")

    def __init__(
        self,
        *,
        connector: str,
        signal_id: str,
        overrides: dict[str, Any] | None = None,
        postgres_conn_id: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.connector = connector
        self.signal_id = signal_id
        self.overrides = overrides
        self.postgres_conn_id = postgres_conn_id
        self.deferrable = deferrable

    def _status(self, config: ConnectorConfig) -> dict[str, Any] | None:
        conn_id, options, statements = self._state_source(config)
        conninfo = WalflowPostgresHook(postgres_conn_id=conn_id).get_conninfo(**options)
        with connect(conninfo, application_name=f"walflow:{config.name}:sensor", initial_statements=statements) as conn:
            return signal_status(conn, config, self.signal_id)

    def _state_source(self, config: ConnectorConfig) -> tuple[str, dict[str, str], str | None]:
        """Where the signal's status is: the state database (``walflow.state.conn.id``) as its Connection says, or the
        source database with the connector's TLS options and initial statements."""
        if config.walflow_state_conn_id:
            return config.walflow_state_conn_id, {}, None
        return (
            self.postgres_conn_id or config.walflow_postgres_conn_id,
            config.conninfo_options(),
            config.database_initial_statements,
        )

    def _check(self, status: dict[str, Any] | None, config: ConnectorConfig) -> bool:
        if not status:
            self.log.info(
                "incremental snapshot %s: signal written, waiting for %s to read it",
                self.signal_id,
                next_stream_run(config),
            )
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
            # the signal's outcome is final: a retry would only wait for a snapshot that will not come
            raise AirflowFailException(
                f"incremental snapshot {self.signal_id} {state}: {status.get('error') or status}"
            )
        return False

    def poke(self, context: Context) -> bool:
        config = resolve(self.connector, self.overrides)
        return self._check(self._status(config), config)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        config = resolve(self.connector, self.overrides)
        conn_id, options, statements = self._state_source(config)
        self.defer(
            trigger=WalflowSnapshotTrigger(
                signal_id=self.signal_id,
                connector=config.name,
                state_table=config.state_table,
                postgres_conn_id=conn_id,
                conninfo_options=options,
                poll_interval=float(self.poke_interval),
                initial_statements=statements,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event.get("status") == "error":
            raise AirflowException(str(event.get("error") or event))
        if event.get("status") not in TERMINAL or not self._check(event, resolve(self.connector, self.overrides)):
            raise AirflowException(f"incremental snapshot {self.signal_id} ended unexpectedly: {event}")


#: Pending WAL that makes a stream batch worth starting, when neither the task nor the connector says otherwise.
#: Not 1: every batch writes its own bookkeeping (the state table) after advancing the slot, and checkpoints
#: write WAL on an idle server, so a threshold of a few bytes would start batch after batch for nothing.
DEFAULT_MIN_PENDING_BYTES = 16 * 1024
#: Seconds after which the sensor lets a batch start anyway (heartbeats, bookkeeping, a slow trickle of changes).
DEFAULT_MAX_WAIT_SECONDS = 300.0


class WalflowPendingWalSensor(BaseSensorOperator):
    """Wait until the connector's slot has at least ``min_bytes`` of unconfirmed WAL, or ``max_wait`` has passed.

    Put it before :class:`~walflow.airflow.operators.WalflowStreamOperator` in a DAG scheduled ``@continuous``
    (with ``max_active_runs=1``): a batch then starts as soon as there is enough to stream, instead of on a
    fixed schedule, and at the latest after ``max_wait``. Both endings succeed; the XCom says which one it was
    (``{"reason": "threshold" | "max_wait", "pending_wal_bytes": n}``). A missing slot fails the task.

    It pokes once through the hook; with ``deferrable=True`` it then hands the wait to
    :class:`~walflow.airflow.triggers.WalflowPendingWalTrigger` in the triggerer, so no worker slot is held while
    the database is idle. Pending WAL is measured in bytes of the server's WAL (see
    :func:`walflow.source.health.pending_wal_bytes`).

    :param connector: the connector's name or YAML path.
    :param min_bytes: pending WAL that ends the wait (default: the connector's ``walflow.stream.trigger.wal.bytes``
        when the configuration has it, else 16 KiB).
    :param max_wait: seconds (or a timedelta) after which the wait ends anyway (default: the connector's
        ``walflow.stream.trigger.max.wait.seconds`` when the configuration has it, else 300). Unlike ``timeout``,
        reaching it is a success.
    :param overrides: Debezium keys that replace the YAML's values.
    :param postgres_conn_id: overrides ``walflow.postgres.conn.id``.
    :param deferrable: wait in the triggerer instead of occupying a worker slot (default: Airflow's
        ``[operators] default_deferrable``, as in Airflow's own providers).
    """

    template_fields: Sequence[str] = ("connector", "min_bytes", "max_wait", "overrides", "postgres_conn_id")
    ui_color = "#deebf7"

    def __init__(
        self,
        *,
        connector: str,
        min_bytes: int | None = None,
        max_wait: float | timedelta | None = None,
        overrides: dict[str, Any] | None = None,
        postgres_conn_id: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", 5.0)
        super().__init__(**kwargs)
        self.connector = connector
        self.min_bytes = min_bytes
        # Airflow's own attribute (BaseSensorOperator keeps a timedelta or None in it, its longest wait between pokes
        # when backing off): here the longest wait before the sensor succeeds anyway, kept in the same type
        self.max_wait = timedelta(seconds=max_wait) if isinstance(max_wait, (int, float)) else max_wait
        self.overrides = overrides
        self.postgres_conn_id = postgres_conn_id
        self.deferrable = deferrable
        self._started: float | None = None

    # -- settings -------------------------------------------------------------------------------
    def _config(self) -> ConnectorConfig:
        return resolve(self.connector, self.overrides)

    def _threshold(self, config: ConnectorConfig) -> int:
        value = self.min_bytes if self.min_bytes is not None else config.walflow_stream_trigger_wal_bytes
        threshold = int(value) if value is not None else DEFAULT_MIN_PENDING_BYTES
        if threshold <= 0:
            raise AirflowException(
                f"min_bytes={threshold!r}: the pending-WAL threshold must be a positive number of bytes"
            )
        return threshold

    def _max_wait(self, config: ConnectorConfig) -> float:
        value = self.max_wait if self.max_wait is not None else config.walflow_stream_trigger_max_wait_seconds
        if isinstance(value, timedelta):
            return value.total_seconds()
        return float(value) if value is not None else DEFAULT_MAX_WAIT_SECONDS

    def _started_at(self, context: Context) -> float:
        """When this wait began (epoch seconds): the first try's start in reschedule mode, else the first poke."""
        if self._started is None:
            first = context["ti"].get_first_reschedule_date(context) if self.reschedule else None
            self._started = first.timestamp() if first is not None else time.time()
        return self._started

    def _conn_id(self, config: ConnectorConfig) -> str:
        return self.postgres_conn_id or config.walflow_postgres_conn_id

    def _measure(self, config: ConnectorConfig) -> int:
        hook = WalflowPostgresHook(postgres_conn_id=self._conn_id(config))
        conninfo = hook.get_conninfo(**config.conninfo_options())
        with connect(
            conninfo,
            application_name=f"walflow:{config.name}:wal-sensor",
            initial_statements=config.database_initial_statements,
        ) as conn:
            return pending_wal_bytes(conn, config.slot_name)

    # -- sensing --------------------------------------------------------------------------------
    def poke(self, context: Context) -> PokeReturnValue:
        config = self._config()
        started = self._started_at(context)
        threshold, max_wait = self._threshold(config), self._max_wait(config)
        pending = self._measure(config)
        if pending >= threshold:
            reason = "threshold"
        elif time.time() - started >= max_wait:
            reason = "max_wait"
        else:
            self.log.info(
                "slot %s: %d byte(s) of WAL pending, waiting for %d (at most %.0f s)",
                config.slot_name,
                pending,
                threshold,
                max_wait,
            )
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=self._done(config.slot_name, reason, pending, threshold))

    def _done(self, slot: str, reason: str, pending: int | None, threshold: int) -> dict[str, Any]:
        self.log.info(
            "slot %s: %s byte(s) of WAL pending (threshold %d): %s",
            slot,
            pending,
            threshold,
            "enough to stream" if reason == "threshold" else "waited long enough, streaming anyway",
        )
        return {"reason": reason, "pending_wal_bytes": pending, "min_bytes": threshold}

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        config = self._config()
        self.defer(
            trigger=WalflowPendingWalTrigger(
                slot_name=config.slot_name,
                min_bytes=self._threshold(config),
                postgres_conn_id=self._conn_id(config),
                conninfo_options=config.conninfo_options(),
                deadline=self._started_at(context) + self._max_wait(config),
                poll_interval=float(self.poke_interval),
                initial_statements=config.database_initial_statements,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        status = event.get("status")
        if status not in ("threshold", "deadline"):
            raise AirflowException(
                f"waiting for pending WAL on slot {event.get('slot')!r} failed: {event.get('message') or event}"
            )
        reason = "threshold" if status == "threshold" else "max_wait"
        return self._done(
            str(event.get("slot")), reason, event.get("pending_wal_bytes"), int(event.get("min_bytes") or 0)
        )
