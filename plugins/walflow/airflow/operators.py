"""Operators: one task unit each, thin adapters over walflow's domain code.

Hooks are built lazily in ``execute``; everything the task does is in plain classes
(:mod:`walflow.source`, :mod:`walflow.capture.stream`) that tests and scripts drive directly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from walflow.airflow.hooks import WalflowKafkaHook, WalflowPostgresHook
from walflow.capture.kafka_signals import send_kafka_signal
from walflow.capture.metrics import (
    failed_streaming_metrics,
    metrics_line,
    numeric,
    snapshot_metrics,
    snapshot_started_metrics,
    streaming_metrics,
)
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.config.connector import ConnectorConfig
from walflow.config.expressions import check_condition, render_condition
from walflow.config.files import resolve
from walflow.errors import ConfigError, WalflowError
from walflow.source.connection import connect
from walflow.source.publication import captured_tables
from walflow.source.signals import send_signal

if TYPE_CHECKING:
    from airflow.sdk import Context


@contextmanager
def fail_fast() -> Iterator[None]:
    """Errors that running the task again cannot fix (configuration, drift, an oversized record, a lost slot) fail
    it at once, without Airflow's retries; the rest (a broker or server away for a moment) stay retryable."""
    try:
        yield
    except WalflowError as exc:
        if exc.retryable:
            raise
        raise AirflowFailException(f"{exc} [not retried: this needs a fix first]") from exc


class _ConnectorOperator(BaseOperator):
    """Common part: which connector, which Connections."""

    def __init__(
        self,
        *,
        connector: str,
        overrides: dict[str, Any] | None = None,
        postgres_conn_id: str | None = None,
        kafka_config_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.connector = connector
        self.overrides = overrides
        self.postgres_conn_id = postgres_conn_id
        self.kafka_config_id = kafka_config_id

    def execute(self, context: Context) -> Any:
        with fail_fast():
            return self._execute(context)

    def _execute(self, context: Context) -> Any:
        """The task's work; errors that retries cannot fix fail it at once (:func:`fail_fast`)."""
        raise NotImplementedError

    def _config(self) -> ConnectorConfig:
        return resolve(self.connector, self.overrides)

    def _conninfo(self, config: ConnectorConfig) -> str:
        hook = WalflowPostgresHook(postgres_conn_id=self.postgres_conn_id or config.walflow_postgres_conn_id)
        return hook.get_conninfo(**config.conninfo_options())

    def _state_conninfo(self, config: ConnectorConfig) -> str | None:
        """The state database's connection string (``walflow.state.conn.id``), or ``None``: the state is in the
        source."""
        if not config.walflow_state_conn_id:
            return None
        return WalflowPostgresHook(postgres_conn_id=config.walflow_state_conn_id).get_conninfo()

    def _kafka_hook(self, config: ConnectorConfig) -> WalflowKafkaHook:
        return WalflowKafkaHook(
            kafka_config_id=self.kafka_config_id or config.walflow_kafka_conn_id,
            topic_partitions=config.topic_creation_default_partitions,
            topic_replication_factor=config.topic_creation_default_replication_factor,
            producer_overrides=config.producer_overrides(),
        )


class WalflowSetupOperator(_ConnectorOperator):
    """Check the source server, then create the connector's publication and replication slot.

    Idempotent: a second run changes nothing. Returns what it found and did (an XCom).

    :param connector: the connector's name (a YAML file in the connectors folder) or a YAML path.
    :param overrides: Debezium keys that replace the YAML's values for this task.
    :param postgres_conn_id: overrides ``walflow.postgres.conn.id``.
    :param kafka_config_id: overrides ``walflow.kafka.conn.id``.
    """

    template_fields: Sequence[str] = ("connector", "overrides", "postgres_conn_id", "kafka_config_id")
    ui_color = "#c7e9c0"

    def _execute(self, context: Context) -> dict[str, Any]:
        config = self._config()
        kafka = self._kafka_hook(config)

        def snapshot_started(count: int) -> None:
            _publish_safely(
                config.name, "snapshot", snapshot_started_metrics(count), self.log, config.custom_metric_tags
            )

        setup = ConnectorSetup(
            config,
            self._conninfo(config),
            lambda: kafka.get_conn,
            progress=self.log.info,
            on_snapshot_start=snapshot_started,
            state_conninfo=self._state_conninfo(config),
        )
        report: dict[str, Any] | None = None
        error: BaseException | None = None
        try:
            report = setup.run()
        except BaseException as exc:
            error = exc
            raise
        finally:
            # a failed run reports too (SnapshotAborted/SnapshotFailed), or dashboards would keep the last success
            metrics = _publish_safely(
                config.name,
                "snapshot",
                snapshot_metrics(report, error=error, started=setup.snapshot_started),
                self.log,
                config.custom_metric_tags,
            )
        assert report is not None
        report["metrics"] = metrics
        self.log.info(
            "connector %s: publication %s (%s), slot %s (%s) at %s, %d captured table(s), snapshot: %s",
            config.name,
            report["publication"],
            "created" if report["publication_created"] else "altered" if report["publication_altered"] else "kept",
            report["slot"],
            "created" if report["slot_created"] else "kept",
            report["slot_confirmed_lsn"],
            len(report["captured_tables"]),
            report["snapshot"],
        )
        return report


def publish_metrics(
    connector: str,
    kind: str,
    metrics: dict[str, Any],
    log: Any,
    stats: Any = None,
    tags: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Log ``metrics`` and send the numeric ones as Airflow gauges named ``walflow.<connector>.<kind>.<metric>``.

    :param stats: the metrics client (default Airflow's ``Stats``, which writes to StatsD or OpenTelemetry as the
        ``[metrics]`` section configures); tests pass their own.
    :param tags: the connector's ``custom.metric.tags``, on every gauge (StatsD carries them with Airflow's
        ``statsd_influxdb_enabled`` or DogStatsD, OpenTelemetry as attributes).
    """
    if stats is None:
        from airflow.sdk.observability.stats import Stats

        stats = Stats
    log.info("connector %s %s metrics: %s", connector, kind, metrics_line(metrics))
    for name, value in numeric(metrics).items():
        stats.gauge(f"walflow.{connector}.{kind}.{name}", value, tags=dict(tags or {}))
    return metrics


def _publish_safely(
    connector: str, kind: str, metrics: dict[str, Any], log: Any, tags: dict[str, str] | None = None
) -> dict[str, Any]:
    """:func:`publish_metrics` where a metrics failure must neither stop the work nor hide the task's own error."""
    try:
        return publish_metrics(connector, kind, metrics, log, tags=tags)
    except Exception as exc:
        log.warning("connector %s: could not send %s metrics (%s)", connector, kind, exc)
        return metrics


class WalflowStreamOperator(_ConnectorOperator):
    """Stream one bounded batch of the connector's slot to Kafka, then advance the slot.

    :param connector: the connector's name (a YAML file in the connectors folder) or a YAML path.
    :param overrides: Debezium keys that replace the YAML's values for this task.
    :param postgres_conn_id: overrides ``walflow.postgres.conn.id``.
    :param kafka_config_id: overrides ``walflow.kafka.conn.id``.
    :param postgres_reader_conn_id: overrides ``walflow.postgres.reader.conn.id`` (the role that evaluates the
        conditions of incremental-snapshot signals).
    """

    template_fields: Sequence[str] = (
        "connector",
        "overrides",
        "postgres_conn_id",
        "kafka_config_id",
        "postgres_reader_conn_id",
    )
    ui_color = "#9ecae1"

    def __init__(self, *, postgres_reader_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.postgres_reader_conn_id = postgres_reader_conn_id

    def _execute(self, context: Context) -> dict[str, Any]:
        config = self._config()
        conninfo = self._conninfo(config)
        producer = self._kafka_hook(config).get_conn
        reader_id = self.postgres_reader_conn_id or config.walflow_postgres_reader_conn_id
        reader = (
            WalflowPostgresHook(postgres_conn_id=reader_id).get_conninfo(**config.conninfo_options())
            if reader_id
            else None
        )
        batch = StreamBatch(
            config, conninfo, producer, reader_conninfo=reader, state_conninfo=self._state_conninfo(config)
        )
        try:
            summary = batch.run()
        except BaseException as exc:
            _publish_safely(
                config.name, "streaming", failed_streaming_metrics(exc), self.log, config.custom_metric_tags
            )
            raise
        result = summary.as_dict()
        metrics = streaming_metrics(summary, captured_tables=self._captured_tables(config, conninfo))
        result["metrics"] = _publish_safely(config.name, "streaming", metrics, self.log, config.custom_metric_tags)
        return result

    def _captured_tables(self, config: ConnectorConfig, conninfo: str) -> list[str] | None:
        """The connector's captured tables for the ``CapturedTables`` metric; ``None`` if they cannot be read now."""
        try:
            with connect(
                conninfo,
                application_name=f"walflow:{config.name}:metrics",
                initial_statements=config.database_initial_statements,
            ) as conn:
                return captured_tables(conn, config)
        except Exception as exc:
            self.log.warning("connector %s: could not list the captured tables for the metrics (%s)", config.name, exc)
            return None


class WalflowSignalOperator(_ConnectorOperator):
    """Write a signal row for the connector's stream task; returns the signal's id (XCom).

    For ``execute-snapshot``, ``data_collections``, ``additional_condition`` and ``surrogate_key`` build the
    reference's signal data. A value typed into a form is data: after Airflow rendered the DAG author's template
    (``{{ params.additional_condition }}``), the condition is rendered once more from a template that may hold only
    text and the run's interval (``{{ data_interval_start }}`` and the like,
    :data:`walflow.config.expressions.CONDITION_VARIABLES`), which is how backfills snapshot each interval; Connections,
    Variables, the rest of the task context and any expression are out of its reach. The condition must be one SQL
    expression over the snapshotted row (checked before the signal is written); the stream task checks it against
    the server's catalog and evaluates it as the reader role (:mod:`walflow.capture.incremental.conditions`).

    :param signal_type: ``execute-snapshot``, ``stop-snapshot``, ``pause-snapshot``, ``resume-snapshot`` or ``log``.
    :param snapshot_type: ``incremental`` (chunks between watermarks, streaming goes on) or ``blocking``
        (streaming pauses while the tables are read whole, as Debezium's blocking snapshots).
    :param data_collections: table names or regular expressions (``schema.table``).
    :param additional_condition: a SQL condition narrowing the snapshot's rows.
    :param surrogate_key: a column to chunk by instead of the primary key.
    :param data: extra signal data (merged last).
    """

    template_fields: Sequence[str] = (
        "connector",
        "overrides",
        "postgres_conn_id",
        "kafka_config_id",
        "signal_type",
        "snapshot_type",
        "data_collections",
        "additional_condition",
        "surrogate_key",
        "data",
    )
    ui_color = "#fdd0a2"

    def __init__(
        self,
        *,
        signal_type: str = "execute-snapshot",
        snapshot_type: str = "incremental",
        data_collections: list[str] | str | None = None,
        additional_condition: str | None = None,
        surrogate_key: str | None = None,
        data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.signal_type = signal_type
        self.snapshot_type = snapshot_type
        self.data_collections = data_collections
        self.additional_condition = additional_condition
        self.surrogate_key = surrogate_key
        self.data = data

    def _execute(self, context: Context) -> str:
        config = self._config()
        payload: dict[str, Any] = {}
        if self.signal_type in ("execute-snapshot", "stop-snapshot"):
            collections = self.data_collections
            if isinstance(collections, str):
                collections = [c.strip() for c in collections.replace("\n", ",").split(",") if c.strip()]
            if self.signal_type == "execute-snapshot" and not collections:
                # before anything is written: a snapshot of nothing would only look like success
                raise ConfigError(
                    "data_collections is empty: name at least one table to snapshot (schema.table or a regular "
                    "expression, one per line in the trigger form); nothing was written"
                )
            if collections:
                payload["data-collections"] = list(collections)
            snapshot_type = str(self.snapshot_type or "incremental").lower()
            if snapshot_type not in ("incremental", "blocking"):
                raise ConfigError(
                    f"snapshot_type {self.snapshot_type!r}: choose 'incremental' or 'blocking'; nothing was written"
                )
            payload["type"] = snapshot_type
        condition = self.additional_condition
        if condition:
            condition = render_condition(str(condition), context).strip()
            if condition:
                payload["additional-condition"] = check_condition(condition, "'additional_condition'")
        if self.surrogate_key:
            payload["surrogate-key"] = self.surrogate_key
        payload.update(self.data or {})
        if not config.signal_table and "kafka" in config.signal_enabled_channels:
            # no signal table (a read-only connector, a team that may not write to the source): the Kafka channel
            producer = self._kafka_hook(config).get_conn
            try:
                signal_id = send_kafka_signal(config, producer, self.signal_type, payload)
            finally:
                producer.close()
            self.log.info(
                "connector %s: sent signal %s %s %s to topic %s",
                config.name,
                signal_id,
                self.signal_type,
                payload,
                config.signal_topic,
            )
            return signal_id
        with connect(
            self._conninfo(config),
            application_name=f"walflow:{config.name}:signal",
            initial_statements=config.database_initial_statements,
        ) as conn:
            signal_id = send_signal(conn, config, self.signal_type, payload)
        self.log.info("connector %s: wrote signal %s %s %s", config.name, signal_id, self.signal_type, payload)
        return signal_id


class WalflowMonitorOperator(_ConnectorOperator):
    """Judge the connector from outside its stream task (:func:`walflow.airflow.status.problems`): the slot's retained
    WAL and lag against ``walflow.slot.*``, a slot ``lost`` or ``unreserved``, no successful batch for longer than
    ``walflow.monitor.max.seconds.since.batch``, and, when ``walflow.monitor.max.lake.records.behind`` is set, how far
    each lake table is behind its topics. It fails (not retried: the next scheduled run looks again) with every
    problem in its message, so the DAG's failure callback and Airflow's notifiers fire even when the stream DAG is
    paused, stuck or failing. It reads the slot's catalog row and walflow's state; the lake and the broker only for
    the lake's limit.

    :param connector: connector name or YAML path (templated).
    :param postgres_conn_id: the source's Connection instead of the connector's ``walflow.postgres.conn.id``.
    """

    template_fields: Sequence[str] = ("connector", "overrides", "postgres_conn_id")

    def __init__(
        self,
        *,
        connector: str,
        overrides: dict[str, Any] | None = None,
        postgres_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(connector=connector, overrides=overrides, postgres_conn_id=postgres_conn_id, **kwargs)

    def _execute(self, context: Context) -> dict[str, Any]:
        from walflow.airflow.status import connector_status

        config = self._config()
        result = connector_status(
            config, self._conninfo(config), lake=config.walflow_monitor_max_lake_records_behind is not None
        )
        found = result["problems"]
        source = result["source"]
        self.log.info(
            "connector %s: %s; slot %s retains %s byte(s) of WAL, %s byte(s) behind the server, last batch %s s ago",
            config.name,
            result["state"],
            config.slot_name,
            source.get("retained_wal_bytes"),
            source.get("lag_bytes"),
            source.get("seconds_since_last_batch"),
        )
        if found:
            raise AirflowFailException(
                f"walflow monitor: {len(found)} problem(s): " + "; ".join(p["reason"] for p in found)
            )
        return {"state": result["state"], "problems": found}
