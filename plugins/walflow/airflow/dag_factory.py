"""Builds each connector's DAGs from its YAML file, so DAG files stay one line long."""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast

from airflow.sdk import DAG, Param

from walflow.airflow.docs import maintain_doc, monitor_doc, setup_doc, snapshot_doc, stream_doc
from walflow.airflow.operators import (
    WalflowMonitorOperator,
    WalflowSetupOperator,
    WalflowSignalOperator,
    WalflowStreamOperator,
)
from walflow.airflow.sensors import WalflowPendingWalSensor, WalflowSnapshotSensor
from walflow.airflow.timetables import BackfillOnlyTimetable
from walflow.config.connector import ConnectorConfig
from walflow.config.files import load_each
from walflow.errors import ConfigError, ConnectorFilesError

log = logging.getLogger(__name__)

START = datetime(2024, 1, 1)

#: what the lake's tasks import (the ``walflow[lake]`` extra): Spark's provider and pyspark on every component that
#: parses the DAGs or runs the apply task, pyiceberg and pyarrow where the job runs
LAKE_MODULES = ("airflow.providers.apache.spark", "pyspark", "pyiceberg", "pyarrow")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def lake_libraries(config: ConnectorConfig) -> str | None:
    """Why a connector whose lake is on cannot run in this Airflow (its lake libraries are missing), or ``None``."""
    if not config.walflow_lake_enabled:
        return None
    missing = [module for module in LAKE_MODULES if not _installed(module)]
    if not missing:
        return None
    return (
        f"'walflow.lake.enabled' is true but this Airflow lacks {', '.join(missing)}: install walflow's lake extra "
        "(pip install 'walflow[lake]') on the scheduler, DAG processor and workers, or set 'walflow.lake.enabled: "
        "false'"
    )


def failure_callback(config: ConnectorConfig) -> Callable[..., Any] | None:
    """The function named by ``walflow.on.failure.callback`` (an import path), or ``None``.

    :raises ConfigError: when it cannot be imported or is not callable; the DAG file then fails to load with the
        key named, as the UI's import errors show.
    """
    path = config.walflow_on_failure_callback
    if not path:
        return None
    module_name, _, attribute = path.rpartition(".")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"connector {config.name!r}: 'walflow.on.failure.callback' = {path!r} cannot be imported ({exc}); put the "
            "module on the scheduler's and workers' Python path (the plugins folder is) or fix the path"
        ) from None
    if not callable(target):
        raise ConfigError(f"connector {config.name!r}: 'walflow.on.failure.callback' = {path!r} is not a function")
    return cast("Callable[..., Any]", target)


def _default_args(config: ConnectorConfig, **extra: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"owner": config.walflow_owner, **extra}
    callback = failure_callback(config)
    if callback is not None:
        args["on_failure_callback"] = callback
    return args


def _stream_retries(config: ConnectorConfig) -> dict[str, Any]:
    """The stream task's retries: Debezium's ``errors.max.retries`` and ``retriable.restart.connector.wait.ms``
    where the connector sets them, else 2 retries 30 s apart."""
    retries = (
        2
        if config.errors_max_retries is None
        else (1000 if config.errors_max_retries < 0 else config.errors_max_retries)
    )
    wait = (
        timedelta(seconds=30)
        if config.retriable_restart_connector_wait_ms is None
        else timedelta(milliseconds=config.retriable_restart_connector_wait_ms)
    )
    return {"retries": retries, "retry_delay": wait}


def setup_dag(config: ConnectorConfig) -> DAG:
    """``<name>__setup``: server checks, publication and slot. Triggered by hand (or by ``make demo``)."""
    with DAG(
        dag_id=f"{config.name}__setup",
        description=f"walflow connector {config.name}: check the server, create publication and slot, initial snapshot",
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=_default_args(config),
        tags=["walflow", config.name],
        doc_md=setup_doc(config),
    ) as dag:
        WalflowSetupOperator(task_id="setup", connector=config.name)
    return dag


def stream_trigger_bytes(config: ConnectorConfig) -> int | None:
    """The connector's ``walflow.stream.trigger.wal.bytes``: when set, its stream DAG runs on demand."""
    return config.walflow_stream_trigger_wal_bytes


def stream_dag(config: ConnectorConfig) -> DAG:
    """``<name>__stream``: one bounded streaming batch per run, one run at a time.

    With ``walflow.stream.trigger.wal.bytes`` set, the DAG runs ``@continuous`` and each run first waits (deferred,
    in the triggerer) until the slot has that much pending WAL or ``walflow.stream.trigger.max.wait.seconds``
    passed: batches start when there is something to stream, for low latency without a tight schedule.
    """
    trigger_bytes = stream_trigger_bytes(config)
    with DAG(
        dag_id=f"{config.name}__stream",
        description=f"walflow connector {config.name}: stream one batch of changes to Kafka"
        + (", then apply it to the lake" if config.walflow_lake_enabled else ""),
        schedule="@continuous" if trigger_bytes else config.walflow_schedule,
        start_date=START,
        catchup=False,
        # One consumer per slot; the advisory lock in the task guards against manual runs as well.
        max_active_runs=1,
        # retries are for what passes by itself (a broker or server away); errors that need a fix fail at once
        default_args=_default_args(config, **_stream_retries(config)),
        tags=["walflow", config.name],
        doc_md=stream_doc(config),
    ) as dag:
        stream = WalflowStreamOperator(task_id="stream", connector=config.name)
        if trigger_bytes:
            (
                WalflowPendingWalSensor(
                    task_id="wait_for_wal",
                    connector=config.name,
                    min_bytes=trigger_bytes,
                    poke_interval=config.trigger_poke_seconds(),
                    deferrable=True,
                )
                >> stream
            )
        if config.walflow_lake_enabled:
            # Spark's provider and pyspark (the lake extra) are imported only for a connector whose lake is on
            from walflow.airflow.lake import apply_task

            stream >> apply_task(config)
    return dag


def maintain_dag(config: ConnectorConfig) -> DAG:
    """``<name>__maintain``: compaction, delete-file rewriting, snapshot expiry and orphan removal of the connector's
    lake tables, on ``walflow.lake.maintain.schedule`` (daily by default). Its task and the stream DAG's apply task
    take the connector's lake lock, so they never run at the same time."""
    with DAG(
        dag_id=f"{config.name}__maintain",
        description=(
            f"walflow connector {config.name}: compact the lake tables, expire old snapshots, remove orphan files"
        ),
        schedule=config.walflow_lake_maintain_schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=_default_args(config, retries=1, retry_delay=timedelta(minutes=5)),
        tags=["walflow", config.name, "lake"],
        doc_md=maintain_doc(config),
    ) as dag:
        from walflow.airflow.lake import maintain_task

        maintain_task(config)
    return dag


def monitor_dag(config: ConnectorConfig) -> DAG:
    """``<name>__monitor``: the connector judged from outside its stream task, on ``walflow.monitor.schedule`` (every
    five minutes by default). It fails, and so calls the connector's failure callback and whatever notifier the DAG's
    users add, when the slot holds too much WAL, lags, is lost, or no batch succeeded for too long: exactly when the
    stream DAG is paused, stuck or failing and cannot say so itself."""
    with DAG(
        dag_id=f"{config.name}__monitor",
        description=f"walflow connector {config.name}: check the slot, the batches and the lake against their limits",
        schedule=config.walflow_monitor_schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        # one problem, one failed run: the next scheduled run is the retry
        default_args=_default_args(config, retries=0),
        # on from the start (Airflow creates DAGs paused by default): an alert that must be switched on is one that
        # is missing the day it is needed; a user who does not want it sets walflow.monitor.schedule: null
        is_paused_upon_creation=False,
        tags=["walflow", config.name, "monitor"],
        doc_md=monitor_doc(config),
    ) as dag:
        WalflowMonitorOperator(task_id="monitor", connector=config.name)
    return dag


def _backfill_schedule(schedule: str | None) -> BackfillOnlyTimetable | None:
    """A cron expression or preset as intervals for backfills only; ``None`` (no backfills) unchanged."""
    if schedule is None or schedule in ("@once", "@continuous"):
        return None
    return BackfillOnlyTimetable(schedule, "UTC")


def snapshot_dag(config: ConnectorConfig) -> DAG:
    """``<name>__snapshot``: an ad-hoc incremental snapshot, triggered from the UI form or by a backfill.

    Its timetable (:class:`~walflow.airflow.timetables.BackfillOnlyTimetable`) gives backfills their data intervals
    and never schedules a run itself, so the DAG is safe to leave unpaused, and its form requires the tables.
    """
    with DAG(
        dag_id=f"{config.name}__snapshot",
        description=f"walflow connector {config.name}: ad-hoc incremental or blocking snapshot of chosen tables",
        # Data intervals, not Airflow 3's default trigger timetable: a backfill's runs then each cover one
        # interval, which an additional condition can use through data_interval_start / data_interval_end.
        schedule=_backfill_schedule(config.walflow_snapshot_schedule),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        render_template_as_native_obj=True,
        default_args=_default_args(config),
        tags=["walflow", config.name, "snapshot"],
        params={
            "data_collections": Param(
                type="array",
                items={"type": "string"},
                minItems=1,
                title="Tables",
                description=(
                    "Tables to snapshot (at least one): schema.table names or regular expressions, one per line."
                ),
            ),
            "snapshot_type": Param(
                "incremental",
                type="string",
                enum=["incremental", "blocking"],
                title="Snapshot type",
                description="incremental: chunks read between watermarks while streaming goes on. blocking: the next "
                "stream batch pauses streaming where it reads the signal, reads the tables whole, then resumes "
                "(Debezium's blocking snapshot; no condition or surrogate key).",
            ),
            "additional_condition": Param(
                None,
                type=["null", "string"],
                title="Additional condition",
                description="Optional: one SQL condition on the rows, as in a WHERE clause (checked, and read in a "
                "READ ONLY transaction). It may use the run's interval, {{ data_interval_start }} and "
                "{{ data_interval_end }}, for backfills; nothing else is rendered.",
            ),
            "surrogate_key": Param(
                None,
                type=["null", "string"],
                title="Surrogate key",
                description="Optional column to chunk by instead of the primary key.",
            ),
        },
        doc_md=snapshot_doc(config),
    ) as dag:
        signal = WalflowSignalOperator(
            task_id="signal",
            connector=config.name,
            data_collections="{{ params.data_collections }}",
            snapshot_type="{{ params.snapshot_type }}",
            additional_condition="{{ params.additional_condition }}",
            surrogate_key="{{ params.surrogate_key or None }}",
        )
        WalflowSnapshotSensor(
            task_id="wait_for_snapshot",
            connector=config.name,
            signal_id="{{ ti.xcom_pull(task_ids='signal') }}",
            poke_interval=config.walflow_snapshot_poke_seconds,
            timeout=24 * 3600,
            mode="reschedule",
            # Airflow's scheduler can fail a rescheduled try that is already running again when it reads the
            # executor's event of the try before late (seen here: "state mismatch ... finished with state success,
            # but the task instance's state attribute is running" on a busy machine; apache/airflow#71580). A poke
            # only reads walflow's state, so a new try is harmless; a snapshot that failed or a timeout still fails
            # at once (AirflowFailException, AirflowSensorTimeout are never retried).
            retries=2,
            retry_delay=timedelta(seconds=config.walflow_snapshot_poke_seconds),
        ).set_upstream(signal)
    return dag


def build_connector_dags(directory: str | None = None) -> dict[str, Any]:
    """Every DAG of every valid connector in the connectors folder, keyed by DAG id.

    A file that cannot be loaded is left out (logged here, and raised by :func:`check_connector_files`, which the
    second DAG file calls so that Airflow lists it among its import errors): a DAG file that raised would take every
    connector's DAGs away, and their slots would keep WAL while nothing streams."""
    dags: dict[str, Any] = {}
    configs, errors = load_each(directory, lake_libraries)
    for path, error in errors.items():
        log.error("connector file %s left out (no DAG until it is fixed): %s", path, error)
    for config in configs:
        built = [setup_dag(config), stream_dag(config)]
        if config.walflow_lake_enabled:
            built.append(maintain_dag(config))
        if config.walflow_monitor_schedule is not None:
            built.append(monitor_dag(config))
        if config.signal_table or "kafka" in config.signal_enabled_channels:
            # the snapshot DAG's signal goes to the signal table, or to Kafka (a read-only connector)
            built.append(snapshot_dag(config))
        for dag in built:
            dags[dag.dag_id] = dag
    return dags


def check_connector_files(directory: str | None = None) -> None:
    """Raise :class:`~walflow.errors.ConnectorFilesError` naming each connector file that :func:`build_connector_dags`
    leaves out, with its error; nothing when every file is valid.

    Called by a DAG file of its own (``dags/walflow_connector_errors.py``): Airflow records an import error per DAG
    file, and marks the DAGs of a file with an import error stale, so the errors go to a file that holds no DAG while
    the connectors' DAG file loads every valid connector."""
    _configs, errors = load_each(directory, lake_libraries)
    if errors:
        raise ConnectorFilesError({str(path): error for path, error in errors.items()})
