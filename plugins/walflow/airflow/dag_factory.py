"""Builds each connector's DAGs from its YAML file, so DAG files stay one line long."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, CronDataIntervalTimetable, Param
from walflow.airflow.operators import WalflowSetupOperator, WalflowSignalOperator, WalflowStreamOperator
from walflow.airflow.lake import apply_task
from walflow.airflow.sensors import WalflowPendingWalSensor, WalflowSnapshotSensor
from walflow.config import ConnectorConfig, load_all

START = datetime(2024, 1, 1)


def setup_dag(config: ConnectorConfig) -> DAG:
    """``<name>__setup``: server checks, publication and slot. Triggered by hand (or by ``make demo``)."""
    with DAG(
        dag_id=f"{config.name}__setup",
        description=f"walflow connector {config.name}: check the server, create publication and slot",
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["walflow", config.name],
        doc_md=f"Sets up connector **{config.name}** (topic prefix `{config.topic_prefix}`, slot `{config.slot_name}`).",
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
        description=f"walflow connector {config.name}: stream one batch of changes to Kafka",
        schedule="@continuous" if trigger_bytes else config.walflow_schedule,
        start_date=START,
        catchup=False,
        # One consumer per slot; the advisory lock in the task guards against manual runs as well.
        max_active_runs=1,
        default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
        tags=["walflow", config.name],
        doc_md=f"Streams connector **{config.name}**'s slot `{config.slot_name}` to topics `{config.topic_prefix}.*`.",
    ) as dag:
        stream = WalflowStreamOperator(task_id="stream", connector=config.name)
        if trigger_bytes:
            WalflowPendingWalSensor(
                task_id="wait_for_wal",
                connector=config.name,
                min_bytes=trigger_bytes,
                poke_interval=config.walflow_stream_trigger_poke_seconds,
                deferrable=True,
            ) >> stream
        if config.walflow_lake_enabled:
            stream >> apply_task(config)
    return dag


def _interval_schedule(schedule: str | None) -> CronDataIntervalTimetable | str | None:
    """A cron expression or preset as a data-interval timetable; ``None`` and ``@once``/``@continuous`` unchanged."""
    if schedule is None or schedule in ("@once", "@continuous"):
        return schedule
    return CronDataIntervalTimetable(schedule, timezone="UTC")


def snapshot_dag(config: ConnectorConfig) -> DAG:
    """``<name>__snapshot``: an ad-hoc incremental snapshot, triggered from the UI form or by a backfill.

    It has a schedule only so that ``airflow backfill`` can create runs with data intervals; it is paused
    when created, so nothing runs unless someone triggers, backfills or unpauses it.
    """
    with DAG(
        dag_id=f"{config.name}__snapshot",
        description=f"walflow connector {config.name}: ad-hoc incremental snapshot of chosen tables",
        # Data intervals, not Airflow 3's default trigger timetable: a backfill's runs then each cover one
        # interval, which an additional condition can use through data_interval_start / data_interval_end.
        schedule=_interval_schedule(config.walflow_snapshot_schedule),
        start_date=START,
        catchup=False,
        is_paused_upon_creation=True,
        max_active_runs=1,
        render_template_as_native_obj=True,
        tags=["walflow", config.name, "snapshot"],
        params={
            "data_collections": Param(
                [],
                type="array",
                items={"type": "string"},
                title="Tables",
                description="Tables to snapshot: schema.table names or regular expressions, one per line.",
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
        doc_md=(
            f"Ad-hoc incremental snapshot for connector **{config.name}**: writes an `execute-snapshot` signal to "
            f"`{config.signal_data_collection}` and waits until the stream DAG has read the tables.\n\n"
            "Backfill an interval's rows with `additional_condition` such as "
            "`updated_at >= '{{ data_interval_start }}' AND updated_at < '{{ data_interval_end }}'`."
        ),
    ) as dag:
        signal = WalflowSignalOperator(
            task_id="signal",
            connector=config.name,
            data_collections="{{ params.data_collections }}",
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
        ).set_upstream(signal)
    return dag


def build_connector_dags(directory: str | None = None) -> dict[str, Any]:
    """Every DAG of every connector in the connectors folder, keyed by DAG id."""
    dags: dict[str, Any] = {}
    for config in load_all(directory):
        built = [setup_dag(config), stream_dag(config)]
        if config.signal_table:
            built.append(snapshot_dag(config))
        for dag in built:
            dags[dag.dag_id] = dag
    return dags
