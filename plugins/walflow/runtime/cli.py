"""``walflow status <connector>``: where a connector stands, from the source database and the lake.

Prints the slot's position, the WAL it retains, its lag behind the server, the time since its position was last
confirmed (judged against the connector's limits), the last stream batch and the last lake commit of each table. The source is reached through the connector's Airflow Connection (or ``--dsn``);
the lake is read with pyiceberg from its JDBC catalog (``walflow.lake.catalog.conn.id``) or else the Hadoop-catalog
warehouse (``--warehouse``, default the connector's ``walflow.lake.warehouse``, else
:func:`walflow.lake.settings.default_warehouse`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from contextlib import ExitStack
from typing import Any

import orjson
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from walflow.capture.rereads import REREADS_KEY, WATCH_PREFIX
from walflow.config.connector import ConnectorConfig
from walflow.config.files import resolve
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
) -> dict[str, Any]:
    """The slot's positions, retained WAL, confirmed lag and time since its last confirmation, judged against the
    connector's limits, and the last batch and snapshot state the connector recorded (in the state database
    ``state_conninfo`` when it is not the source)."""
    with ExitStack() as opened:
        conn = opened.enter_context(connect(conninfo, application_name=f"walflow:{connector}:status", initial_statements=initial_statements))
        state_conn = opened.enter_context(connect(state_conninfo, application_name=f"walflow:{connector}:status")) if state_conninfo else conn
        store = StateStore(state_conn, connector, state_table)
        last, snapshot = store.get("last_batch"), store.get("snapshot")
        state = {"last_batch": last}
        rereads = store.get(REREADS_KEY) or {}
        for signal, entry in rereads.items():
            entry["status"] = (store.get(signal_key(signal)) or {}).get("status")
        stale = sorted(k[len(WATCH_PREFIX):] for k, v in store.prefixed(WATCH_PREFIX).items() if isinstance(v, dict) and v.get("stale"))
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
    # re-reads walflow started itself whose sweep the lake has not been told of yet, and tables it cannot re-read
    out["rereads"] = [{"signal": signal, **entry} for signal, entry in sorted(rereads.items())]
    out["stale_tables"] = stale
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
                committed_at=dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, dt.timezone.utc).isoformat(timespec="seconds"),
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


def status(connector: str, dsn: str | None = None, warehouse: str | None = None) -> dict[str, Any]:
    config = resolve(connector)
    conninfo = source_conninfo(config, dsn)
    limits = health_limits(config)
    source = slot_status(conninfo, config.name, config.slot_name, config.state_table, limits, config.database_initial_statements, state_conninfo(config))
    result: dict[str, Any] = {"connector": config.name, "source": source}
    if config.walflow_lake_enabled:
        lake = LakeSettings.from_config(config, **({"warehouse": warehouse} if warehouse else {}))
        catalog = lake_catalog(config)
        where = catalog.describe(lake.warehouse) if catalog else lake.warehouse
        result["lake"] = {"warehouse": where, "tables": lake_status(lake, catalog)}
    return result


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f} MB"


def render(result: dict[str, Any]) -> str:
    src = result["source"]
    lines = [f"connector {result['connector']}"]
    if not src["exists"]:
        lines.append(f"  slot {src['slot']}: MISSING (run the setup DAG; changes made since the slot was lost were not captured)")
    else:
        lines += [
            f"  slot {src['slot']} on database {src['database']}: {'active (pid %s)' % src['active_pid'] if src['active'] else 'inactive'}, wal_status {src['wal_status']}",
            f"    confirmed {src['confirmed_flush_lsn']}, restart {src['restart_lsn']}, server at {src['current_wal_lsn']}",
            f"    retained WAL {_mb(src['retained_wal_bytes'])}, lag {_mb(src['lag_bytes'])}, last confirmed "
            + (f"{src['seconds_since_confirmed']} s ago" if src.get("seconds_since_confirmed") is not None else "at an unknown time"),
        ]
    for warning in src.get("warnings") or []:
        lines.append(f"  WARNING: {warning}")
    if src.get("error") and src["exists"]:
        lines.append(f"  ERROR: {src['error']}")
    last = src.get("last_batch")
    if last:
        lines.append(
            f"  last batch: {last['events']} event(s) in {last['seconds']} s, stopped by {last['stopped_by']}, "
            f"{src.get('seconds_since_last_batch', '?')} s ago, slot advanced to {last['advanced_to']}"
        )
    else:
        lines.append("  last batch: none recorded")
    if src.get("snapshot"):
        lines.append(f"  initial snapshot: {src['snapshot'].get('status')}")
    for reread in src.get("rereads") or []:
        sweep = "its sweep's position known" if reread.get("position") is not None else "its sweep's position not reached yet"
        lines.append(f"  re-reading {reread['schema']}.{reread['table']} ({reread['signal']}: {reread.get('status') or 'pending'}, {sweep}): {reread['reason']}")
    for table in src.get("stale_tables") or []:
        lines.append(f"  STALE: {table} changed its rows without events and has no key; the lake stops at it (give it a key, or walflow reset --lake)")
    lake = result.get("lake")
    if lake:
        lines.append(f"  lake ({lake['warehouse']}):")
        for t in lake["tables"] or []:
            if t["snapshot_id"] is None:
                lines.append(f"    {t['table']}: no commit yet")
                continue
            offsets = ", ".join(f"{p}:{o}" for parts in (t.get("offsets") or {}).values() for p, o in parts.items()) or "-"
            behind = f", {t['backlog']} record(s) left by the last apply" if t.get("backlog") else ""
            lines.append(f"    {t['table']}: {t['rows']} row(s), last commit {t['committed_at']} ({t['operation']}), offsets {offsets}{behind}")
        if not lake["tables"]:
            lines.append("    no tables yet")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="walflow", description="walflow operations")
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("status", help="slot position, retained WAL, lag, last run and last lake commit per table")
    cmd.add_argument("connector", help="connector name (or YAML path)")
    cmd.add_argument("--dsn", default=None, help="libpq conninfo of the source (default: the connector's Airflow Connection)")
    cmd.add_argument("--warehouse", default=None, help="Hadoop-catalog warehouse folder of the lake")
    cmd.add_argument("--json", action="store_true", help="print JSON")
    cmd = commands.add_parser(
        "reset",
        help="start a connector over after its topics were lost: drop its slot and state (and with --lake its lake "
        "tables); the next setup run takes a new snapshot",
    )
    cmd.add_argument("connector", help="connector name (or YAML path)")
    cmd.add_argument("--lake", action="store_true", help="also drop the connector's lake tables (Hadoop catalog on a local folder)")
    cmd.add_argument("--dsn", default=None, help="libpq conninfo of the source (default: the connector's Airflow Connection)")
    args = parser.parse_args(argv)
    import logging

    logging.getLogger("pyiceberg").setLevel(logging.WARNING)
    if args.command == "reset":
        from walflow.runtime.reset import reset_connector

        try:
            config = resolve(args.connector)
            report = reset_connector(config, source_conninfo(config, args.dsn), lake=args.lake, state_conninfo=state_conninfo(config))
        except WalflowError as exc:
            print(f"walflow reset: {exc}", file=sys.stderr)
            return 2
        print("\n".join(report.lines()))
        return 0
    try:
        result = status(args.connector, args.dsn, args.warehouse)
    except WalflowError as exc:
        print(f"walflow status: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2, default=str).decode())
    else:
        print(render(result))
    # for monitoring: 1 when the slot is missing or past a hard limit (what fails the stream task), else 0
    return 1 if result["source"].get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
