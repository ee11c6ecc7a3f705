"""The ``walflow`` command line: ``status``, ``reset``, ``sql``, ``example-connector``, ``dag-files``.

A thin adapter: it parses the arguments, calls the stage that does the work and prints. ``walflow status
<connector>`` prints what :func:`walflow.airflow.status.status` gathers (the slot's position, the WAL it retains, its
lag behind the server, the time since its position was last confirmed judged against the connector's limits, the
last stream batch and the last lake commit of each table), as text (:func:`render`) or JSON, and exits with 1 when the
slot is missing or past a hard limit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from walflow.airflow.status import overview, source_conninfo, state_conninfo, status
from walflow.config.files import resolve
from walflow.errors import WalflowError
from walflow.resources import package_text

#: the SQL scripts shipped in walflow.source.sql, by the name ``walflow sql`` takes
SQL_SCRIPTS = ("roles", "ddl_facts")
#: the DAG files shipped in walflow.airflow.dag_files, which ``walflow dag-files`` writes into Airflow's DAGs folder
DAG_FILES = ("walflow_connectors.py", "walflow_connector_errors.py")


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f} MB"


def render(result: dict[str, Any]) -> str:
    src = result["source"]
    lines = [f"connector {result['connector']}: {result.get('state', '?').upper()}"]
    for problem in result.get("problems") or []:
        lines.append(f"  {problem['state']}: {problem['reason']}")
    if src.get("reachable") is False:
        return "\n".join(lines)  # the problem above says why the source cannot be reached
    if not src["exists"]:
        lines.append(
            f"  slot {src['slot']}: MISSING (run the setup DAG; changes made since the slot was lost were not captured)"
        )
    else:
        activity = f"active (pid {src['active_pid']})" if src["active"] else "inactive"
        lines += [
            f"  slot {src['slot']} on database {src['database']}: {activity}, wal_status {src['wal_status']}",
            f"    confirmed {src['confirmed_flush_lsn']}, restart {src['restart_lsn']}, server at "
            f"{src['current_wal_lsn']}",
            f"    retained WAL {_mb(src['retained_wal_bytes'])}, lag {_mb(src['lag_bytes'])}, last confirmed "
            + (
                f"{src['seconds_since_confirmed']} s ago"
                if src.get("seconds_since_confirmed") is not None
                else "at an unknown time"
            ),
        ]
    # the slot's warnings and error are among the problems listed first
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
        sweep = (
            "its sweep's position known"
            if reread.get("position") is not None
            else "its sweep's position not reached yet"
        )
        lines.append(
            f"  re-reading {reread['schema']}.{reread['table']} ({reread['signal']}: "
            f"{reread.get('status') or 'pending'}, {sweep}): {reread['reason']}"
        )
    for table in src.get("stale_tables") or []:
        lines.append(
            f"  STALE: {table} changed its rows without events and has no key; the lake stops at it (give it a key, or "
            "walflow reset --lake)"
        )
    if src.get("events_left_out"):
        lines.append(
            f"  INCOMPLETE: {src['events_left_out']} event(s) could not be built and were left out "
            "(event.processing.failure.handling.mode warn or skip); the task logs name each, and their lake tables "
            "carry the walflow.incomplete property"
        )
    lake = result.get("lake")
    if lake:
        lines.append(f"  lake ({lake['warehouse']}):")
        for t in lake["tables"] or []:
            if t["snapshot_id"] is None:
                lines.append(f"    {t['table']}: no commit yet")
                continue
            offsets = (
                ", ".join(f"{p}:{o}" for parts in (t.get("offsets") or {}).values() for p, o in parts.items()) or "-"
            )
            behind = f", {t['backlog']} record(s) left by the last apply" if t.get("backlog") else ""
            lines.append(
                f"    {t['table']}: {t['rows']} row(s), last commit {t['committed_at']} ({t['operation']}), offsets "
                f"{offsets}{behind}"
            )
        if not lake["tables"]:
            lines.append("    no tables yet")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="walflow", description="walflow operations")
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser(
        "status", help="slot position, retained WAL, lag, last run and last lake commit per table"
    )
    cmd.add_argument(
        "connector", nargs="?", default=None, help="connector name (or YAML path); none: every connector at a glance"
    )
    cmd.add_argument(
        "--dsn", default=None, help="libpq conninfo of the source (default: the connector's Airflow Connection)"
    )
    cmd.add_argument("--warehouse", default=None, help="Hadoop-catalog warehouse folder of the lake")
    cmd.add_argument(
        "--json", action="store_true", help="print JSON (what the walflow page of Airflow's UI reads from its route)"
    )
    cmd.add_argument(
        "--history-hours", type=float, default=None, help="with a connector: its batches of the last hours too"
    )
    cmd = commands.add_parser(
        "reset",
        help="start a connector over after its topics were lost: drop its slot and state (and with --lake its lake "
        "tables); the next setup run takes a new snapshot",
    )
    cmd.add_argument("connector", help="connector name (or YAML path)")
    cmd.add_argument(
        "--lake", action="store_true", help="also drop the connector's lake tables (Hadoop catalog on a local folder)"
    )
    cmd.add_argument(
        "--dsn", default=None, help="libpq conninfo of the source (default: the connector's Airflow Connection)"
    )
    cmd = commands.add_parser(
        "sql",
        help="print one of the SQL scripts an administrator runs on the source database (docs/deploy.md): roles "
        "(least-privilege roles and grants, psql -v variables) or ddl_facts (keys as they were at each DDL)",
    )
    cmd.add_argument("script", choices=SQL_SCRIPTS)
    commands.add_parser("example-connector", help="print the example connector file, to start a connector from")
    cmd = commands.add_parser(
        "dag-files",
        help="write walflow's DAG files (every connector's DAGs, and the import error of broken connector files) into "
        "Airflow's DAGs folder",
    )
    cmd.add_argument("folder", help="Airflow's DAGs folder")
    args = parser.parse_args(argv)
    if args.command == "dag-files":
        Path(args.folder).mkdir(parents=True, exist_ok=True)
        for name in DAG_FILES:
            target = Path(args.folder) / name
            target.write_text(package_text("walflow.airflow.dag_files", name))
            print(f"wrote {target}")
        return 0
    if args.command == "sql":
        sys.stdout.write(package_text("walflow.source.sql", f"{args.script}.sql"))
        return 0
    if args.command == "example-connector":
        sys.stdout.write(package_text("walflow.config.examples", "inventory.yaml"))
        return 0
    import logging

    logging.getLogger("pyiceberg").setLevel(logging.WARNING)
    if args.command == "reset":
        from walflow.admin.reset import reset_connector

        try:
            config = resolve(args.connector)
            report = reset_connector(
                config, source_conninfo(config, args.dsn), lake=args.lake, state_conninfo=state_conninfo(config)
            )
        except WalflowError as exc:
            print(f"walflow reset: {exc}", file=sys.stderr)
            return 2
        print("\n".join(report.lines()))
        return 0
    try:
        if args.connector is None:
            everything = overview(dags=True)
            results = everything["connectors"]
        else:
            results = [status(args.connector, args.dsn, args.warehouse, history_hours=args.history_hours, dags=True)]
    except WalflowError as exc:
        print(f"walflow status: {exc}", file=sys.stderr)
        return 2
    if args.json:
        shown = everything if args.connector is None else results[0]
        print(orjson.dumps(shown, option=orjson.OPT_INDENT_2, default=str).decode())
    else:
        print("\n".join(render(result) for result in results))
        for path, error in (everything["invalid"] if args.connector is None else {}).items():
            print(f"left out: {path}: {error}")
    # for monitoring: 1 when a slot is missing, unreachable or past a hard limit (what fails the stream task), else 0
    return 1 if any(result["source"].get("error") for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
