"""Where a connector stands, from the source database and the lake: what ``walflow status`` prints, and the
connector's connections and lake catalog as the command line and DAG files reach them.

:func:`status` gathers the slot's position, the WAL it retains, its lag behind the server, the time since its
position was last confirmed (judged against the connector's limits), the last stream batch and the last lake commit
of each table. The source is reached through the connector's Airflow Connection (or a given libpq string); the lake
is read with pyiceberg from its JDBC catalog (``walflow.lake.catalog.conn.id``) or else the Hadoop-catalog warehouse
(the given folder, default the connector's ``walflow.lake.warehouse``, else
:func:`walflow.lake.settings.default_warehouse`).

Importing this module imports no Airflow: Airflow is imported (through :mod:`walflow.airflow.hooks`) only when a
Connection has to be read, so ``walflow status --dsn`` on a connector without a catalog Connection runs without it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import orjson
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from walflow.capture.batches import batch_history
from walflow.capture.incremental.state import STATE_KEY
from walflow.capture.rereads import REREADS_KEY, WATCH_PREFIX
from walflow.config.connector import ConnectorConfig
from walflow.config.files import load_each, resolve
from walflow.errors import WalflowError
from walflow.lake.settings import LakeSettings
from walflow.lake.tables import JdbcCatalog, PropertiesCatalog
from walflow.source.connection import connect
from walflow.source.health import HealthLimits, assess_slot_health, health_limits, slot_health
from walflow.source.signals import signal_key
from walflow.source.state import StateStore


def _conninfo(conn_id: str, options: dict[str, str]) -> str:
    """The Connection's libpq string with the connector's TLS options, as the tasks connect."""
    try:
        from walflow.airflow.hooks import WalflowPostgresHook
    except ImportError as exc:  # pragma: no cover - Airflow is a dependency; the message helps a partial install
        raise WalflowError(f"cannot read Airflow Connection {conn_id!r} ({exc}); pass --dsn") from None
    return WalflowPostgresHook(postgres_conn_id=conn_id).get_conninfo(**options)


def slot_status(
    conninfo: str,
    connector: str,
    slot: str,
    state_table: tuple[str, str],
    limits: HealthLimits | None = None,
    initial_statements: str | None = None,
    state_conninfo: str | None = None,
    history_hours: float | None = None,
) -> dict[str, Any]:
    """The slot's positions, retained WAL, confirmed lag and time since its last confirmation, judged against the
    connector's limits, and the last batch and snapshot state the connector recorded (in the state database
    ``state_conninfo`` when it is not the source); with ``history_hours``, the batches of that many last hours."""
    with ExitStack() as opened:
        conn = opened.enter_context(
            connect(conninfo, application_name=f"walflow:{connector}:status", initial_statements=initial_statements)
        )
        state_conn = (
            opened.enter_context(connect(state_conninfo, application_name=f"walflow:{connector}:status"))
            if state_conninfo
            else conn
        )
        store = StateStore(state_conn, connector, state_table)
        last, snapshot = store.get("last_batch"), store.get("snapshot")
        incremental = store.get(STATE_KEY)
        history = (
            batch_history(store, since_ms=int((time.time() - history_hours * 3600) * 1000)) if history_hours else None
        )
        state = {"last_batch": last}
        rereads = store.get(REREADS_KEY) or {}
        for signal, entry in rereads.items():
            entry["status"] = (store.get(signal_key(signal)) or {}).get("status")
        stale = sorted(
            k[len(WATCH_PREFIX) :]
            for k, v in store.prefixed(WATCH_PREFIX).items()
            if isinstance(v, dict) and v.get("stale")
        )
        health = slot_health(conn, slot, state)
        database = conn.execute("SELECT database FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    out: dict[str, Any] = {"slot": slot, "exists": health.exists}
    if health.exists:
        out.update(
            database=database[0] if database else None,
            active=health.active_pid is not None,
            active_pid=health.active_pid,
            restart_lsn=health.restart_lsn,
            confirmed_flush_lsn=health.confirmed_flush_lsn,
            current_wal_lsn=health.current_wal_lsn,
            retained_wal_bytes=health.retained_wal_bytes,
            lag_bytes=health.confirmed_lag_bytes,
            wal_status=health.wal_status,
            seconds_since_confirmed=health.seconds_since_confirmed,
            confirmed_at_ms=health.confirmed_at_ms,
        )
    warnings, error = assess_slot_health(health, limits or HealthLimits())
    out["warnings"] = warnings
    out["error"] = error
    out["last_batch"] = last
    if last and last.get("finished_at_ms"):
        out["seconds_since_last_batch"] = round(time.time() - last["finished_at_ms"] / 1000, 1)
    out["snapshot"] = snapshot
    out["incremental"] = incremental_progress(incremental)
    if history is not None:
        out["history"] = history
    # re-reads walflow started itself whose sweep the lake has not been told of yet, and tables it cannot re-read
    out["rereads"] = [{"signal": signal, **entry} for signal, entry in sorted(rereads.items())]
    out["stale_tables"] = stale
    # events left out by event.processing.failure.handling.mode warn/skip: the initial snapshot's rows and the stream's
    # events (its incremental and blocking snapshots' rows too); the lake tables of their sources are incomplete
    out["events_left_out"] = int((snapshot or {}).get("rows_left_out") or 0) + int(
        (last or {}).get("events_left_out") or 0
    )
    return out


def lake_status(settings: LakeSettings, catalog: JdbcCatalog | PropertiesCatalog | None = None) -> list[dict[str, Any]]:
    """The current snapshot of every lake table of the connector: from its JDBC catalog when it has one, else
    from the Hadoop catalog's warehouse folder."""
    from walflow.lake import (  # pyiceberg: only when a lake is read
        BACKLOG_PROPERTY,
        OFFSETS_PROPERTY,
        lake_table_names,
        parse_offsets,
        read_lake_table,
    )

    tables = []
    for name in lake_table_names(settings, catalog):
        table = read_lake_table(settings, name, catalog)
        snapshot = table.current_snapshot() if table is not None else None
        entry: dict[str, Any] = {"table": f"{settings.namespace}.{name}", "snapshot_id": None}
        if snapshot is not None:
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            entry.update(
                snapshot_id=snapshot.snapshot_id,
                committed_at=dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, dt.timezone.utc).isoformat(
                    timespec="seconds"
                ),
                # Spark's merge-on-read writes position deletes: live rows are records minus deleted positions
                rows=int(summary.get("total-records", 0)) - int(summary.get("total-position-deletes", 0)),
                operation=snapshot.summary.operation.value if snapshot.summary else None,
            )
            for older in reversed(table.snapshots()):
                text = (older.summary.additional_properties if older.summary else {}).get(OFFSETS_PROPERTY)
                if text:
                    entry["offsets"] = parse_offsets(text)
                    # the records the last apply left for the next runs (walflow.lake.max.records), by partition
                    backlog = (older.summary.additional_properties if older.summary else {}).get(BACKLOG_PROPERTY)
                    if backlog:
                        entry["backlog"] = sum(orjson.loads(backlog).values())
                    break
        tables.append(entry)
    return tables


def lake_catalog(config: ConnectorConfig) -> JdbcCatalog | PropertiesCatalog | None:
    """The connector's catalog from its Airflow Connection (``walflow.lake.catalog.conn.id``), or None."""
    if not config.walflow_lake_catalog_conn_id:
        return None
    from walflow.airflow.hooks import WalflowIcebergCatalogHook

    return WalflowIcebergCatalogHook(config.walflow_lake_catalog_conn_id).get_conn()


def source_conninfo(config: ConnectorConfig, dsn: str | None) -> str:
    """The source's libpq string: ``dsn`` (with the connector's TLS settings unless it sets them) or the Connection."""
    options = config.conninfo_options()
    if dsn:
        # the connector's TLS settings apply to --dsn too, unless the string sets them itself
        given = conninfo_to_dict(dsn)
        return make_conninfo(dsn, **{k: v for k, v in options.items() if k not in given})
    return _conninfo(config.walflow_postgres_conn_id, options)


def state_conninfo(config: ConnectorConfig) -> str | None:
    """The state database's libpq string (``walflow.state.conn.id``), or ``None`` when the state is in the source."""
    return _conninfo(config.walflow_state_conn_id, {}) if config.walflow_state_conn_id else None


def incremental_progress(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    """The running incremental snapshot as the status shows it: its signal, tables done and left, chunks and rows
    read, whether it is paused, and the signals waiting behind it."""
    if not raw:
        return None
    left = list(raw.get("tables") or [])
    done = [t for t in (raw.get("rows_per_table") or {}) if t not in left]
    return {
        "signal": raw.get("signal_id"),
        "paused": bool(raw.get("paused")),
        "tables_done": len(done),
        "tables_total": len(done) + len(left),
        "current_table": left[0] if left else None,
        "tables_left": left,
        "chunks": int(raw.get("chunks") or 0),
        "rows": int(raw.get("rows") or 0),
        "rows_per_table": dict(raw.get("rows_per_table") or {}),
        "queued": [{"signal": q.get("signal_id"), "tables": q.get("tables")} for q in raw.get("queued") or []],
    }


#: a connector at a glance, worst first: the state of its worst problem (no problem: ``flowing``)
STATES = ("failing", "stopped", "behind", "flowing")
#: how long a part (a database, the broker) may take to answer the status before it counts as unreachable
REACH_SECONDS = 5.0


def _reached(conninfo: str) -> str:
    """``conninfo`` with a connect timeout, unless it sets one: an unreachable server costs seconds, not minutes."""
    given = conninfo_to_dict(conninfo)
    return conninfo if "connect_timeout" in given else make_conninfo(conninfo, connect_timeout=int(REACH_SECONDS))


def kafka_settings(config: ConnectorConfig) -> dict[str, Any]:
    """The librdkafka settings of the connector's Kafka Connection (``walflow.kafka.conn.id``)."""
    from walflow.airflow.hooks import WalflowKafkaHook

    return dict(WalflowKafkaHook.get_connection(config.walflow_kafka_conn_id).extra_dejson)


def lake_behind(tables: list[dict[str, Any]], ends: dict[str, dict[int, int]]) -> None:
    """Add to each lake table the records between its offsets (where its next apply starts) and its topics' ends."""
    for table in tables:
        offsets = table.get("offsets")
        if not offsets:
            continue
        table["records_behind"] = sum(
            max(0, end - int(offsets.get(topic, {}).get(partition, 0)))
            for topic in offsets
            for partition, end in ends.get(topic, {}).items()
        )


def airflow_dags(config: ConnectorConfig) -> dict[str, Any]:
    """The connector's DAGs as Airflow's metadata database has them: paused or not, and each one's last run (its
    state, id and when it ended). Read where Airflow's database is (the API server, the CLI), never in a task."""
    from airflow.models import DagModel, DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    kinds = ("setup", "stream", "snapshot", "maintain", "monitor")
    out: dict[str, Any] = {}
    with create_session() as session:
        for kind in kinds:
            dag_id = f"{config.name}__{kind}"
            model = session.scalar(select(DagModel).where(DagModel.dag_id == dag_id))
            if model is None:
                continue
            run = session.scalar(
                select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.run_after.desc()).limit(1)
            )
            out[kind] = {
                "dag_id": dag_id,
                "paused": bool(model.is_paused),
                "last_run": None
                if run is None
                else {
                    "run_id": run.run_id,
                    "state": str(run.state) if run.state is not None else None,
                    "run_after": run.run_after.isoformat() if run.run_after else None,
                    "end_date": run.end_date.isoformat() if run.end_date else None,
                },
            }
    return out


def problems(result: dict[str, Any], config: ConnectorConfig) -> list[dict[str, str]]:
    """What is wrong with the connector, each as ``{"state": <one of STATES>, "reason": <text>}``: the text names the
    connector, the slot or table, the figure and the limit it passed. Pure (the page, the CLI and the monitor DAG
    judge alike)."""
    name, slot = config.name, config.slot_name
    found: list[dict[str, str]] = []

    def add(state: str, reason: str) -> None:
        found.append({"state": state, "reason": f"connector {name!r}: {reason}"})

    source = result.get("source") or {}
    if source.get("reachable") is False:
        add("failing", f"the source database cannot be reached: {source.get('error')}")
    elif source.get("error"):
        add("failing", str(source["error"]))
    for warning in source.get("warnings") or []:
        add("behind", str(warning))
    limit = config.walflow_monitor_max_seconds_since_batch
    if source.get("reachable") is not False and source.get("exists") and limit is not None:
        since = source.get("seconds_since_last_batch")
        if since is None:
            # never streamed: a problem once the setup is older than the limit (its snapshot record says when it
            # ended); an initial snapshot still running is not one
            snapshot = source.get("snapshot") or {}
            ready_ms = snapshot.get("completed_ms") or snapshot.get("at_ms")
            waited = (int(result.get("checked_at_ms") or 0) - int(ready_ms)) / 1000 if ready_ms else None
            if snapshot.get("status") != "running" and (waited is None or waited > limit):
                add(
                    "stopped",
                    f"slot {slot!r} has no stream batch recorded"
                    + (f" {waited:.0f} s after its setup" if waited is not None else "")
                    + f", above walflow.monitor.max.seconds.since.batch={limit:g} (run the stream DAG)",
                )
        elif since > limit:
            active = "active" if source.get("active") else "inactive"
            add(
                "stopped",
                f"no stream batch succeeded for {since:.0f} s (slot {slot!r} {active}), above "
                f"walflow.monitor.max.seconds.since.batch={limit:g}",
            )
    dags = result.get("dags") or {}
    stream = dags.get("stream") if isinstance(dags, dict) else None
    if isinstance(stream, dict):
        if stream.get("paused"):
            add("stopped", f"its stream DAG {stream['dag_id']} is paused")
        run = stream.get("last_run") or {}
        if run.get("state") == "failed":
            add("failing", f"the last run of {stream['dag_id']} ({run.get('run_id')}) failed")
    lake = result.get("lake")
    if isinstance(lake, dict):
        if lake.get("error"):
            add("failing", f"the lake cannot be read: {lake['error']}")
        if lake.get("kafka_error"):
            add("failing", f"the broker cannot be reached for the topics' ends: {lake['kafka_error']}")
        behind = config.walflow_monitor_max_lake_records_behind
        for table in lake.get("tables") or []:
            records = table.get("records_behind")
            if behind is not None and records is not None and records > behind:
                add(
                    "behind",
                    f"lake table {table['table']} is {records} record(s) behind its topics, above "
                    f"walflow.monitor.max.lake.records.behind={behind}",
                )
    return found


def connector_status(
    config: ConnectorConfig,
    dsn: str | None = None,
    warehouse: str | None = None,
    *,
    history_hours: float | None = None,
    lake: bool = True,
    dags: bool = False,
) -> dict[str, Any]:
    """Where one connector stands: ``source`` (:func:`slot_status`), with ``lake`` its lake tables (:func:`lake_status`)
    and how far each is behind its topics, with ``dags`` its DAGs in Airflow (:func:`airflow_dags`); then ``state``
    and ``problems`` (:func:`problems`). A part that cannot be reached (a database, the broker, the warehouse, Airflow's
    database) says so in its own ``error`` and the rest is still reported."""
    result: dict[str, Any] = {"connector": config.name, "checked_at_ms": int(time.time() * 1000)}
    try:
        result["source"] = slot_status(
            _reached(source_conninfo(config, dsn)),
            config.name,
            config.slot_name,
            config.state_table,
            health_limits(config),
            config.database_initial_statements,
            state_conninfo(config),
            history_hours,
        )
    except Exception as exc:  # walflow's, psycopg's, a Connection Airflow does not have: this connector's part only
        result["source"] = {"slot": config.slot_name, "reachable": False, "error": _short(exc)}
    if config.walflow_lake_enabled and lake:
        result["lake"] = _lake_part(config, warehouse)
    if dags:
        try:
            result["dags"] = airflow_dags(config)
        except Exception as exc:  # Airflow's database away or not configured: the page says so, the rest stands
            result["dags"] = {"error": _short(exc)}
    found = problems(result, config)
    result["problems"] = found
    result["state"] = next((s for s in STATES if any(p["state"] == s for p in found)), "flowing")
    return result


def _lake_part(config: ConnectorConfig, warehouse: str | None) -> dict[str, Any]:
    settings = LakeSettings.from_config(config, **({"warehouse": warehouse} if warehouse else {}))
    part: dict[str, Any] = {"warehouse": settings.warehouse, "tables": []}
    try:
        catalog = lake_catalog(config)
        part["warehouse"] = catalog.describe(settings.warehouse) if catalog else settings.warehouse
        part["tables"] = lake_status(settings, catalog)
    except Exception as exc:  # pyiceberg's and the catalog's errors are many; any of them means "cannot read"
        part["error"] = _short(exc)
        return part
    topics = sorted({topic for t in part["tables"] for topic in (t.get("offsets") or {})})
    if topics:
        from walflow.kafka import topic_ends

        try:
            lake_behind(part["tables"], topic_ends(kafka_settings(config), topics, timeout=REACH_SECONDS))
        except Exception as exc:  # librdkafka's and the Connection's errors: the broker's part says it is away
            part["kafka_error"] = _short(exc)
    return part


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def status(
    connector: str,
    dsn: str | None = None,
    warehouse: str | None = None,
    *,
    history_hours: float | None = None,
    dags: bool = False,
) -> dict[str, Any]:
    """Where the connector (a name or YAML path) stands (:func:`connector_status`). ``dsn`` replaces the source's
    Connection, ``warehouse`` the Hadoop catalog's folder.

    :raises ConfigError: when no valid connector has that name."""
    return connector_status(resolve(connector), dsn, warehouse, history_hours=history_hours, dags=dags)


def overview(
    directory: str | None = None, *, dags: bool = False, only: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    """Every connector at a glance: each valid one's source part, state and problems (no lake: the connector's own
    status has it), read in parallel; and each connector file walflow left out, with why. ``only`` keeps the
    connectors it accepts by name (the UI's route: those the user may read), before anything is read of them."""
    configs, errors = load_each(directory)
    if only is not None:
        configs = [c for c in configs if only(c.name)]
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(configs)))) as pool:
        results = list(pool.map(lambda c: connector_status(c, lake=False, dags=dags), configs))
    return {
        "checked_at_ms": int(time.time() * 1000),
        "connectors": results,
        "invalid": {str(path): str(error) for path, error in sorted(errors.items())},
    }
