"""Start a connector over: the recovery after its topics were lost (``walflow reset <connector> [--lake]``).

When the broker loses the connector's topics (the embedded broker keeps them in memory; a real cluster can lose a
topic to a mistaken deletion), the records before the loss are gone and the lake's stored offsets point past the
end of the recreated topics, so the lake job refuses to go on (``TopicMismatchError``). Nothing can be replayed:
the data has to be read again. A reset drops the connector's replication slot and its state (snapshot status,
incremental snapshots, recorded keys, last batch; its claim on the slot and topic prefix stays), and with
``lake=True`` its lake tables, so that the next run of ``<name>__setup`` is a first setup: a new slot with an
exported snapshot, every table read again into the topics, and the stream and lake going on from there.
"""

from __future__ import annotations

import logging
import shutil
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from psycopg import sql

from walflow.capture.drift import OWNER_KEY, check_claims
from walflow.config.connector import ConnectorConfig
from walflow.errors import ConcurrentRunError, ConfigError, SlotError
from walflow.lake.columns import CONNECTOR_PROPERTY
from walflow.source.connection import connect
from walflow.source.locks import lake_lock, try_lock_slot
from walflow.source.slot import slot_info
from walflow.source.state import StateStore

log = logging.getLogger(__name__)


@dataclass
class ResetReport:
    """What a reset removed."""

    connector: str
    slot_dropped: bool = False
    state_keys: list[str] = field(default_factory=list)
    lake_tables: list[str] = field(default_factory=list)
    lake_folder: str | None = None
    lake_kept: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"connector {self.connector}: reset"]
        out.append(f"  replication slot: {'dropped' if self.slot_dropped else 'none to drop'}")
        out.append(f"  state: {len(self.state_keys)} record(s) removed ({', '.join(self.state_keys) or 'none'})")
        if self.lake_folder is not None:
            out.append(
                f"  lake: {len(self.lake_tables)} table(s) removed from {self.lake_folder} "
                f"({', '.join(self.lake_tables) or 'none'})"
            )
            if self.lake_kept:
                out.append(f"  lake: kept {', '.join(self.lake_kept)}")
        out.append(f"  next: run {self.connector}__setup, which takes a new snapshot, then {self.connector}__stream")
        return out


def table_owner(folder: Path) -> str | None:
    """The connector recorded as the owner of the Iceberg table in ``folder`` (a Hadoop catalog's table, read with
    :func:`walflow.lake.tables.read_hadoop_table`), or None when it records none or cannot be read."""
    from walflow.lake.tables import read_hadoop_table  # pyiceberg: only when a lake is reset

    try:
        table = read_hadoop_table(str(folder.parent.parent), folder.parent.name, folder.name)
    except (OSError, ValueError):
        return None
    owner = table.properties.get(CONNECTOR_PROPERTY) if table is not None else None
    return owner if isinstance(owner, str) else None


def lake_folder(config: ConnectorConfig) -> Path:
    """The folder of the connector's lake tables under a Hadoop catalog on a local (or mounted) file system.

    :raises ConfigError: for any other catalog or warehouse: walflow cannot drop tables there itself.
    """
    from walflow.lake.settings import LakeSettings

    settings = LakeSettings.from_config(config)
    prefix = f"spark.sql.catalog.{settings.catalog}"
    spark_conf = config.walflow_lake_spark_conf
    if config.walflow_lake_catalog_conn_id:
        kind = f"given by Connection {config.walflow_lake_catalog_conn_id!r}"  # the task adds its settings when it runs
    elif f"{prefix}.catalog-impl" in spark_conf and f"{prefix}.type" not in spark_conf:
        kind = spark_conf[f"{prefix}.catalog-impl"]
    else:
        kind = spark_conf.get(f"{prefix}.type", "hadoop")
    location = urlparse(settings.warehouse)
    if kind != "hadoop" or location.scheme not in ("", "file"):
        raise ConfigError(
            f"connector {config.name!r}: its lake is not a Hadoop catalog on a local folder (catalog type {kind!r}, "
            f"warehouse {settings.warehouse!r}), so walflow cannot drop its tables itself. Drop the tables of "
            f"namespace {settings.namespace!r} in the catalog (DROP TABLE "
            f"{settings.catalog}.{settings.namespace}.<table> PURGE in Spark SQL), or set a new "
            "'walflow.lake.namespace', then reset without --lake"
        )
    warehouse = Path(location.path if location.scheme else settings.warehouse).resolve()
    folder = (warehouse / settings.namespace).resolve()
    if folder.parent != warehouse or settings.namespace in ("", ".", ".."):
        # an absolute namespace, '..' or a slash would put another folder (or the whole warehouse) in its place
        raise ConfigError(
            f"connector {config.name!r}: lake namespace {settings.namespace!r} is not one folder of the warehouse "
            f"{str(warehouse)!r} (it resolves to {str(folder)!r}), so reset --lake removes nothing; set "
            "'walflow.lake.namespace' to a plain name"
        )
    return folder


def reset_connector(
    config: ConnectorConfig, conninfo: str, *, lake: bool = False, state_conninfo: str | None = None
) -> ResetReport:
    """Drop the connector's slot and state (and lake tables with ``lake``); refused while a task of it runs.

    :param state_conninfo: the state database (``walflow.state.conn.id``), when the state is not in the source.

    :raises ConcurrentRunError: when a stream or setup task holds the slot.
    :raises SlotError: when another process consumes the slot.
    :raises ConfigError: with ``lake`` on a lake walflow cannot clear itself (before anything is dropped).
    """
    report = ResetReport(config.name)
    folder = lake_folder(config) if lake else None
    with ExitStack() as held:
        if folder is not None and not held.enter_context(lake_lock(conninfo, config.name, 0)):
            # its lake apply or maintenance runs (they hold the same lock): its tables must not go under it
            raise ConcurrentRunError(
                f"a lake apply or maintenance of connector {config.name!r} is running; wait for it to end (or stop "
                "it), then reset again"
            )
        _reset(config, conninfo, report, folder, state_conninfo)
    for line in report.lines():
        log.info("%s", line)
    return report


def _reset(
    config: ConnectorConfig, conninfo: str, report: ResetReport, folder: Path | None, state_conninfo: str | None = None
) -> None:
    with ExitStack() as opened:
        conn = opened.enter_context(
            connect(
                conninfo,
                application_name=f"walflow:{config.name}:reset",
                initial_statements=config.database_initial_statements,
            )
        )
        state_conn = (
            opened.enter_context(connect(state_conninfo, application_name=f"walflow:{config.name}:reset"))
            if state_conninfo
            else conn
        )
        try_lock_slot(conn, config)
        slot = slot_info(conn, config.slot_name)
        if slot is not None and slot.active_pid is not None:
            raise SlotError(
                f"replication slot {config.slot_name!r} is in use by process {slot.active_pid}; stop it first"
            )
        row = conn.execute("SELECT current_database()").fetchone()
        assert row is not None  # a SELECT without FROM returns its row
        database = row[0]
        if slot is not None and (slot.slot_type != "logical" or slot.plugin != "pgoutput" or slot.database != database):
            # a physical standby's slot, or another database's: not one this connector can have created
            raise SlotError(
                f"replication slot {config.slot_name!r} is a {slot.slot_type} slot with plugin {slot.plugin!r} of "
                f"database {slot.database!r}, not a pgoutput slot of {database!r}: it is not this connector's, and "
                "reset drops nothing. Check 'slot.name'"
            )
        store = StateStore(state_conn, config.name, config.state_table)
        if store.exists():
            check_claims(store, config)  # another connector's slot or topic prefix: refused before anything goes
        # one transaction: a slot that cannot be dropped keeps the state with it (the next setup then sees both);
        # with the state in another database, the slot goes first, then the state (a failure in between leaves a
        # state without slot, which the next reset clears)
        with state_conn.transaction():
            if state_conn is not conn and slot is not None:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (config.slot_name,))
                report.slot_dropped = True
            if store.exists():
                rows = state_conn.execute(
                    sql.SQL("DELETE FROM {} WHERE connector = %s AND key <> %s RETURNING key").format(
                        sql.Identifier(*store.table)
                    ),
                    (config.name, OWNER_KEY),
                ).fetchall()
                report.state_keys = sorted(row[0] for row in rows)
            if state_conn is conn and slot is not None:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (config.slot_name,))
                report.slot_dropped = True
        conn.execute("SELECT pg_advisory_unlock_all()")
    if folder is not None:
        report.lake_folder = str(folder)
        if folder.is_dir():
            # only the tables this connector owns (or that an earlier walflow created without recording an owner):
            # another connector's table in the same namespace is its own, whatever the namespace setting says
            for table in sorted(p for p in folder.iterdir() if p.is_dir()):
                owner = table_owner(table)
                if owner is not None and owner != config.name:
                    report.lake_kept.append(f"{table.name} (owned by connector {owner!r})")
                    continue
                shutil.rmtree(table)
                report.lake_tables.append(table.name)
            if not any(folder.iterdir()):
                folder.rmdir()
