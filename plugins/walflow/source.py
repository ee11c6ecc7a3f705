"""The source database: connections, server checks, publication and replication slot.

Everything here is plain psycopg 3. Airflow's hook only supplies the connection string; the checks and
the DDL are the same whether an operator, a test or a user's script calls them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from walflow.config import ConnectorConfig
from walflow.convert import SESSION_SETTINGS
from walflow.errors import ConcurrentRunError, SlotError, SourceError
from walflow.events import Filters

log = logging.getLogger(__name__)

MIN_SERVER_VERSION = 100000
MESSAGES_SERVER_VERSION = 140000


def connect(conninfo: str, *, autocommit: bool = True, application_name: str = "walflow", **kwargs: object) -> psycopg.Connection:
    """Open a connection whose text output is what :mod:`walflow.convert` expects."""
    try:
        conn = psycopg.connect(conninfo, autocommit=autocommit, application_name=application_name, **kwargs)
    except psycopg.OperationalError as exc:
        raise SourceError(f"cannot connect to the source database: {str(exc).strip()}") from None
    with conn.cursor() as cur:
        for name, value in SESSION_SETTINGS.items():
            cur.execute(sql.SQL("SET {} TO {}").format(sql.Identifier(name), sql.Literal(value)))
    if not autocommit:
        conn.commit()
    return conn


def quote_table(schema: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


@dataclass
class ServerInfo:
    version_num: int
    version: str
    wal_level: str
    max_replication_slots: int
    used_replication_slots: int
    database: str
    user: str
    is_superuser: bool
    has_replication: bool


@dataclass
class SetupReport:
    """What :func:`setup_source` found and changed, returned as the setup task's XCom."""

    server_version: str = ""
    publication: str = ""
    publication_created: bool = False
    publication_altered: bool = False
    slot: str = ""
    slot_created: bool = False
    slot_confirmed_lsn: str | None = None
    captured_tables: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def server_info(conn: psycopg.Connection) -> ServerInfo:
    with conn.cursor() as cur:
        cur.execute(
            """
            SELECT current_setting('server_version_num')::int, current_setting('server_version'),
                   current_setting('wal_level'), current_setting('max_replication_slots')::int,
                   (SELECT count(*) FROM pg_replication_slots), current_database(), current_user,
                   r.rolsuper, r.rolreplication
            FROM pg_roles r WHERE r.rolname = current_user
            """
        )
        row = cur.fetchone()
    assert row is not None
    return ServerInfo(*row)


def check_server(conn: psycopg.Connection, config: ConnectorConfig, *, creating_slot: bool) -> ServerInfo:
    """Check everything the connector needs from the server; raise :class:`SourceError` naming the fix."""
    info = server_info(conn)
    if info.version_num < MIN_SERVER_VERSION:
        raise SourceError(
            f"PostgreSQL {info.version} is too old: walflow needs 10 or newer for pgoutput (14 or newer for "
            "logical decoding messages). Upgrade the server."
        )
    if info.wal_level != "logical":
        raise SourceError(
            f"the server runs with wal_level={info.wal_level!r}; logical decoding needs wal_level=logical. "
            "Set it in postgresql.conf (ALTER SYSTEM SET wal_level = logical) and restart the server."
        )
    if not (info.is_superuser or info.has_replication):
        raise SourceError(
            f"role {info.user!r} has neither REPLICATION nor SUPERUSER; grant it with "
            f"ALTER ROLE {info.user} REPLICATION (see include/sql/roles.sql)"
        )
    if creating_slot and info.used_replication_slots >= info.max_replication_slots:
        raise SourceError(
            f"all {info.max_replication_slots} replication slots are in use (max_replication_slots); raise "
            "max_replication_slots and restart, or drop an unused slot with pg_drop_replication_slot()"
        )
    return info


def list_tables(conn: psycopg.Connection, filters: Filters) -> list[tuple[str, str, int, str, bool]]:
    """Ordinary and partitioned tables the filters capture: (schema, table, oid, replica identity, has PK)."""
    with conn.cursor() as cur:
        cur.execute(
            """
            SELECT n.nspname, c.relname, c.oid, c.relreplident,
                   EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
              AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%%'
              AND n.nspname NOT LIKE 'pg_temp%%'
            ORDER BY 1, 2
            """
        )
        rows = cur.fetchall()
    return [r for r in rows if filters.table_included(r[0], r[1])]


def publication_tables(conn: psycopg.Connection, name: str) -> tuple[bool, bool, set[tuple[str, str]]] | None:
    """Return (puballtables, publishes-all-operations, {(schema, table)}) or ``None`` if it does not exist."""
    with conn.cursor() as cur:
        cur.execute("SELECT puballtables, pubinsert AND pubupdate AND pubdelete FROM pg_publication WHERE pubname = %s", (name,))
        row = cur.fetchone()
        if row is None:
            return None
        cur.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (name,))
        tables = {(s, t) for s, t in cur.fetchall()}
    return bool(row[0]), bool(row[1]), tables


def ensure_publication(
    conn: psycopg.Connection,
    config: ConnectorConfig,
    tables: Iterable[tuple[str, str]],
    report: SetupReport,
) -> None:
    """Create or check the publication per ``publication.autocreate.mode``; idempotent."""
    name = config.publication_name
    mode = config.publication_autocreate_mode
    wanted = set(tables)
    existing = publication_tables(conn, name)
    report.publication = name
    if existing is None:
        if mode == "disabled":
            raise SourceError(
                f"publication {name!r} does not exist and 'publication.autocreate.mode' is 'disabled'; create it "
                f"(CREATE PUBLICATION {name} FOR TABLE ...) or set the mode to 'filtered' or 'all_tables'"
            )
        try:
            with conn.cursor() as cur:
                if mode == "all_tables":
                    cur.execute(sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES").format(sql.Identifier(name)))
                else:
                    if not wanted:
                        raise SourceError(
                            f"'publication.autocreate.mode' is 'filtered' but no table matches the include/exclude "
                            f"lists, so publication {name!r} would be empty; check 'table.include.list'"
                        )
                    cur.execute(
                        sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                            sql.Identifier(name), sql.SQL(", ").join(quote_table(s, t) for s, t in sorted(wanted))
                        )
                    )
        except psycopg.errors.InsufficientPrivilege as exc:
            raise SourceError(
                f"cannot create publication {name!r}: {exc.diag.message_primary}. 'all_tables' needs a superuser; "
                "'filtered' needs ownership of the captured tables (see include/sql/roles.sql), or create the "
                "publication yourself and set 'publication.autocreate.mode: disabled'"
            ) from None
        report.publication_created = True
        log.info("created publication %s (%s)", name, mode)
        return
    all_tables, all_ops, published = existing
    if not all_ops:
        report.warnings.append(f"publication {name!r} does not publish every operation (insert, update, delete)")
    if mode == "filtered" and not all_tables and published != wanted:
        with conn.cursor() as cur:
            cur.execute(
                sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(
                    sql.Identifier(name), sql.SQL(", ").join(quote_table(s, t) for s, t in sorted(wanted))
                )
            )
        report.publication_altered = True
        log.info("publication %s now holds %d table(s)", name, len(wanted))
    elif not all_tables:
        missing = sorted(wanted - published)
        if missing:
            report.warnings.append(
                f"publication {name!r} lacks captured table(s) {', '.join(f'{s}.{t}' for s, t in missing)}; "
                "their changes will not be streamed"
            )


@dataclass
class SlotInfo:
    name: str
    plugin: str | None
    slot_type: str
    database: str | None
    active_pid: int | None
    restart_lsn: str | None
    confirmed_flush_lsn: str | None
    wal_status: str | None


def slot_info(conn: psycopg.Connection, slot: str) -> SlotInfo | None:
    with conn.cursor() as cur:
        cur.execute(
            """
            SELECT slot_name, plugin, slot_type, database, active_pid, restart_lsn::text,
                   confirmed_flush_lsn::text, wal_status
            FROM pg_replication_slots WHERE slot_name = %s
            """,
            (slot,),
        )
        row = cur.fetchone()
    return SlotInfo(*row) if row else None


def check_slot(conn: psycopg.Connection, config: ConnectorConfig, database: str, *, missing_ok: bool) -> SlotInfo | None:
    """Check the slot is a pgoutput logical slot of this database that nobody else consumes."""
    slot = slot_info(conn, config.slot_name)
    if slot is None:
        if missing_ok:
            return None
        raise SlotError(
            f"replication slot {config.slot_name!r} does not exist. It was dropped, or the server is a new primary "
            "after a failover: changes made since the last run may have been missed. walflow never recreates a slot "
            f"silently; re-run the setup DAG ({config.name}__setup) with a snapshot mode that re-reads the data "
            "('when_needed' or 'always')."
        )
    if slot.slot_type != "logical" or slot.plugin != "pgoutput":
        raise SlotError(
            f"replication slot {slot.name!r} is a {slot.slot_type} slot with plugin {slot.plugin!r}; walflow needs a "
            "logical pgoutput slot. Choose another 'slot.name' or drop this slot."
        )
    if slot.database != database:
        raise SlotError(
            f"replication slot {slot.name!r} belongs to database {slot.database!r}, not {database!r}; choose another "
            "'slot.name'"
        )
    if slot.wal_status == "lost":
        raise SlotError(
            f"replication slot {slot.name!r} has lost required WAL (wal_status=lost, max_slot_wal_keep_size exceeded): "
            f"changes were missed. Drop the slot and re-run {config.name}__setup with a snapshot mode that re-reads the data."
        )
    if slot.active_pid is not None:
        raise SlotError(
            f"replication slot {slot.name!r} is in use by another process (PID {slot.active_pid}); a slot has one "
            "consumer at a time. Stop that consumer or give this connector its own 'slot.name'."
        )
    return slot


def create_slot(conn: psycopg.Connection, slot: str) -> str:
    """Create the logical pgoutput slot; return its consistent point LSN."""
    with conn.cursor() as cur:
        cur.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        row = cur.fetchone()
    assert row is not None
    return row[0]


def advisory_lock_key(slot: str) -> str:
    return f"walflow:{slot}"


def try_lock_slot(conn: psycopg.Connection, config: ConnectorConfig) -> None:
    """Take the session advisory lock that makes this process the slot's only walflow consumer."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (advisory_lock_key(config.slot_name),))
        row = cur.fetchone()
    if not row or not row[0]:
        raise ConcurrentRunError(
            f"another walflow task is already streaming slot {config.slot_name!r} of connector {config.name!r}; "
            "one consumer per slot. This run stops without reading anything; the next scheduled run continues."
        )


def setup_source(conn: psycopg.Connection, config: ConnectorConfig, *, create_slot_now: bool = True) -> SetupReport:
    """Check the server, then create the publication and (unless told not to) the slot. Idempotent.

    The slot is created last, so a failed publication step leaves no slot retaining WAL. The setup operator
    passes ``create_slot_now=False`` and creates the slot itself when it must export the slot's snapshot.
    """
    report = SetupReport()
    filters = Filters(config)
    existing = slot_info(conn, config.slot_name)
    info = check_server(conn, config, creating_slot=existing is None)
    report.server_version = info.version
    tables = list_tables(conn, filters)
    for schema, table, _oid, replident, has_pk in tables:
        report.captured_tables.append(f"{schema}.{table}")
        if not has_pk and replident in ("d", "n"):
            report.warnings.append(
                f"table {schema}.{table} has no primary key and REPLICA IDENTITY "
                f"{'DEFAULT' if replident == 'd' else 'NOTHING'}: only its inserts can be captured (PostgreSQL rejects "
                f"its updates and deletes while it is published). Add a primary key or ALTER TABLE ... REPLICA IDENTITY FULL."
            )
    published = {(s, t) for s, t, *_ in tables}
    if config.signal_table:
        published.add(config.signal_table)
    ensure_publication(conn, config, published, report)
    slot = check_slot(conn, config, info.database, missing_ok=True)
    report.slot = config.slot_name
    if slot is None and not create_slot_now:
        return report
    if slot is None:
        report.slot_confirmed_lsn = create_slot(conn, config.slot_name)
        report.slot_created = True
        log.info("created replication slot %s at %s", config.slot_name, report.slot_confirmed_lsn)
    else:
        report.slot_confirmed_lsn = slot.confirmed_flush_lsn
    for warning in report.warnings:
        log.warning("%s", warning)
    return report
