"""The source database: connections, server checks, publication and replication slot.

Everything here is plain psycopg 3. Airflow's hook only supplies the connection string; the checks and
the DDL are the same whether an operator, a test or a user's script calls them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from walflow.config import ConnectorConfig
from walflow.convert import SESSION_SETTINGS
from walflow.errors import ConcurrentRunError, SlotError, SourceError, SourceUnavailableError
from walflow.events import Filters
from walflow.queries import use_cursors

log = logging.getLogger(__name__)

#: The oldest server walflow runs against. What sets it, newest first: the initial snapshot creates its slot with
#: ``CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')`` (15; 14 only knows ``EXPORT_SNAPSHOT``), watermarks and
#: the ``messages`` option of pgoutput (14), ``pg_replication_slots.wal_status`` (13), ``hashtextextended`` and
#: ``pg_replication_slot_advance`` (11).
MIN_SERVER_VERSION = 150000
MESSAGES_SERVER_VERSION = 140000


def split_statements(statements: str | None) -> list[str]:
    """``database.initial.statements`` as Debezium reads it: ``;`` separates statements, ``;;`` is a literal ``;``."""
    if not statements:
        return []
    placeholder = "\x00"
    parts = statements.replace(";;", placeholder).split(";")
    return [part.replace(placeholder, ";").strip() for part in parts if part.strip()]


def connect(
    conninfo: str,
    *,
    autocommit: bool = True,
    application_name: str = "walflow",
    initial_statements: str | None = None,
    **kwargs: object,
) -> psycopg.Connection:
    """Open a connection whose text output is what :mod:`walflow.convert` expects.

    :param initial_statements: the connector's ``database.initial.statements``, run on every connection walflow
        opens to read the database (not on the replication connection that creates a slot, as in Debezium).
    :raises SourceError: when the server cannot be reached or an initial statement fails.
    """
    try:
        conn = use_cursors(psycopg.connect(conninfo, autocommit=autocommit, application_name=application_name, **kwargs))
    except psycopg.OperationalError as exc:
        raise SourceUnavailableError(f"cannot connect to the source database: {str(exc).strip()}") from None
    check_encoding(conn)
    with conn.cursor() as cur:
        for name, value in SESSION_SETTINGS.items():
            cur.execute(sql.SQL("SET {} TO {}").format(sql.Identifier(name), sql.Literal(value)))
        for statement in split_statements(initial_statements):
            try:
                cur.execute(statement.encode())  # user SQL, run as written (bytes: no placeholder parsing)
            except psycopg.Error as exc:
                conn.close()
                raise SourceError(
                    f"'database.initial.statements' statement {statement!r} failed: {str(exc).strip()}. Fix or remove it "
                    "in the connector's YAML."
                ) from None
    if not autocommit:
        conn.commit()
    return conn


def check_encoding(conn: psycopg.Connection) -> None:
    """Refuse a database whose encoding is not UTF8, naming it: pgoutput sends text in the database's encoding and
    Debezium's events are UTF-8, so another encoding garbles (or, with SQL_ASCII, cannot even tell) characters."""
    encoding = conn.info.parameter_status("server_encoding")
    if encoding is not None and encoding.upper() not in ("UTF8", "UTF-8", "UNICODE"):
        database = conn.info.dbname
        conn.close()
        raise SourceError(
            f"database {database!r} uses encoding {encoding}; walflow needs UTF8 (the WAL carries text in the "
            f"database's encoding, and change events are UTF-8{', which SQL_ASCII cannot be converted to' if encoding.upper() == 'SQL_ASCII' else ''}). "
            f"Capture a UTF8 database: create one (CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0) and move "
            "the data there"
        )


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


def check_server_version(version_num: int, version: str) -> None:
    """Refuse a server older than :data:`MIN_SERVER_VERSION`, naming its version and the fix.

    :param version_num: ``server_version_num`` (for example 140011).
    :param version: ``server_version`` as the server spells it, quoted in the message.
    :raises SourceError: when the server is too old.
    """
    if version_num < MIN_SERVER_VERSION:
        need = f"{MIN_SERVER_VERSION // 10000}"
        raise SourceError(
            f"PostgreSQL {version} (server_version_num {version_num}) is too old: walflow needs PostgreSQL {need} or "
            f"newer (the initial snapshot creates its slot with CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export'), "
            f"incremental snapshots need logical decoding messages). Upgrade the server to {need} or newer, or point "
            "the connector's Airflow Connection at a newer server."
        )


def check_server(conn: psycopg.Connection, config: ConnectorConfig, *, creating_slot: bool) -> ServerInfo:
    """Check everything the connector needs from the server; raise :class:`SourceError` naming the fix."""
    info = server_info(conn)
    check_server_version(info.version_num, info.version)
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
    """Ordinary and partitioned tables the filters capture: (schema, table, oid, replica identity, has PK).

    A partitioned table and its partitions are all listed, as Debezium reads them: its snapshot reads the parent and
    each partition into their own topics, and pgoutput streams a partition's changes under the partition's name."""
    with conn.cursor() as cur:
        cur.execute(
            """
            SELECT n.nspname, c.relname, c.oid, c.relreplident,
                   EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p')
              AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%%'
              AND n.nspname NOT LIKE 'pg_temp%%'
            ORDER BY 1, 2
            """
        )
        rows = cur.fetchall()
    return [r for r in rows if filters.table_included(r[0], r[1])]


def captured_tables(conn: psycopg.Connection, config: ConnectorConfig) -> list[str]:
    """``schema.table`` of every table whose changes this connector streams: the filters' tables that the
    publication publishes (all of them for a ``FOR ALL TABLES`` publication). The reference's ``CapturedTables``."""
    tables = {(s, t) for s, t, *_ in list_tables(conn, Filters(config))}
    published = publication_tables(conn, config.publication_name)
    if published is not None and not published[0]:
        tables &= published[2]
    return [f"{s}.{t}" for s, t in sorted(tables)]


def publication_tables(conn: psycopg.Connection, name: str) -> tuple[bool, bool, set[tuple[str, str]]] | None:
    """Return (puballtables, publishes-all-operations, {(schema, table)}) or ``None`` if it does not exist."""
    with conn.cursor() as cur:
        cur.execute("SELECT puballtables, pubinsert AND pubupdate AND pubdelete FROM pg_publication WHERE pubname = %s", (name,))
        row = cur.fetchone()
        if row is None:
            return None
        # pg_publication_tables lists the partitions of a partitioned table the publication holds, not the table
        # itself: a partition's ancestors count as published too (pg_partition_ancestors gives a partition and its
        # ancestors, and nothing for a table that is no partition)
        cur.execute(
            """
            SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s
            UNION
            SELECT an.nspname, ac.relname
            FROM pg_publication_tables pt
            JOIN pg_namespace ln ON ln.nspname = pt.schemaname
            JOIN pg_class lc ON lc.relnamespace = ln.oid AND lc.relname = pt.tablename
            CROSS JOIN LATERAL pg_partition_ancestors(lc.oid) AS a(relid)
            JOIN pg_class ac ON ac.oid = a.relid
            JOIN pg_namespace an ON an.oid = ac.relnamespace
            WHERE pt.pubname = %s AND lc.relispartition
            """,
            (name, name),
        )
        tables = {(s, t) for s, t in cur.fetchall()}
    return bool(row[0]), bool(row[1]), tables


def _names(tables: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{s}.{t}" for s, t in sorted(tables))


def check_publication_privileges(
    conn: psycopg.Connection, name: str, mode: str, tables: set[tuple[str, str]], *, creating: bool
) -> None:
    """Check, before any DDL, that the role may create (or alter) the publication; raise naming cause and fix.

    PostgreSQL's rules: ``CREATE PUBLICATION`` needs CREATE on the database; ``FOR ALL TABLES`` needs a
    superuser; ``FOR TABLE`` / ``ALTER PUBLICATION ... SET TABLE`` need ownership of every table named (and, for
    ``ALTER``, of the publication). Membership of the owning role counts, which is what include/sql/roles.sql sets up.
    """
    row = conn.execute(
        "SELECT r.rolsuper, has_database_privilege(current_database(), 'CREATE'), current_user, current_database(), "
        "(SELECT pg_has_role(p.pubowner, 'USAGE') FROM pg_publication p WHERE p.pubname = %s) "
        "FROM pg_roles r WHERE r.rolname = current_user",
        (name,),
    ).fetchone()
    assert row is not None
    superuser, can_create, user, database, owns_publication = row
    if superuser:
        return
    if creating and not can_create:
        raise SourceError(
            f"role {user!r} may not create publication {name!r}: it lacks CREATE on database {database!r}. Grant it "
            f"(GRANT CREATE ON DATABASE {database} TO {user}; see include/sql/roles.sql), or create the publication "
            "yourself and set 'publication.autocreate.mode: disabled'"
        )
    if creating and mode == "all_tables":
        raise SourceError(
            f"role {user!r} may not create publication {name!r} FOR ALL TABLES: PostgreSQL allows that to superusers "
            "only. Use 'publication.autocreate.mode: filtered' (the role must own the captured tables, see "
            "include/sql/roles.sql), or let a superuser create the publication and set the mode to 'disabled'"
        )
    if not creating and owns_publication is False:
        raise SourceError(
            f"role {user!r} may not alter publication {name!r} to follow the include lists: it does not own it. "
            f"Let its owner run ALTER PUBLICATION {name} OWNER TO {user}, or set 'publication.autocreate.mode: "
            "disabled' and maintain the publication's tables yourself"
        )
    if not tables:
        return
    with conn.cursor() as cur:
        cur.execute(
            """
            SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE (n.nspname, c.relname) IN (SELECT * FROM unnest(%s::text[], %s::text[]))
              AND NOT pg_has_role(c.relowner, 'USAGE')
            """,
            ([s for s, _ in tables], [t for _, t in tables]),
        )
        foreign = {(s, t) for s, t in cur.fetchall()}
    if foreign:
        raise SourceError(
            f"role {user!r} may not {'create' if creating else 'alter'} the 'filtered' publication {name!r}: it does not "
            f"own table(s) {_names(foreign)}, and PostgreSQL lets only a table's owner add it to a publication. Hand "
            "the tables to a group the role belongs to (include/sql/roles.sql does), or create the publication as "
            "their owner and set 'publication.autocreate.mode: disabled'"
        )


def check_select_privilege(conn: psycopg.Connection, tables: Iterable[tuple[str, str, int]]) -> None:
    """Refuse captured tables the role cannot read (SELECT on the table and USAGE on its schema): snapshots read
    them and would fail half-way otherwise."""
    oids = {oid: (schema, table) for schema, table, oid in tables}
    if not oids:
        return
    with conn.cursor() as cur:
        cur.execute(
            "SELECT o, has_table_privilege(o, 'SELECT'), has_schema_privilege(c.relnamespace, 'USAGE') "
            "FROM unnest(%s::oid[]) AS o JOIN pg_class c ON c.oid = o",
            (list(oids),),
        )
        rows = cur.fetchall()
        cur.execute("SELECT current_user")
        user = cur.fetchone()[0]  # type: ignore[index]
    no_usage = sorted({oids[o][0] for o, _select, usage in rows if not usage})
    if no_usage:
        schemas = ", ".join(sql.Identifier(n).as_string(conn) for n in no_usage)
        raise SourceError(
            f"role {user!r} lacks USAGE on schema(s) {schemas} of captured tables, so it cannot read them even with "
            f"SELECT. Grant it (GRANT USAGE ON SCHEMA {schemas} TO {user}; include/sql/roles.sql does for every "
            "captured table's schema) or leave the tables out with 'table.exclude.list'"
        )
    denied = {oids[o] for o, select, _usage in rows if not select}
    if denied:
        raise SourceError(
            f"role {user!r} lacks SELECT on captured table(s) {_names(denied)}; snapshots read them. Grant it "
            f"(GRANT SELECT ON {_names(denied)} TO {user}; see include/sql/roles.sql) or leave the tables out with "
            "'table.exclude.list'"
        )


def replica_identity_warning(schema: str, table: str, replident: str, has_pk: bool) -> str | None:
    """The warning setup gives for a captured table whose updates or deletes cannot be captured, or ``None``.

    PostgreSQL rejects UPDATE and DELETE on a table published for them unless the table has a replica identity:
    REPLICA IDENTITY DEFAULT without a primary key, and NOTHING in any case, leave it without one.
    """
    if replident == "n":
        why = "has a primary key but REPLICA IDENTITY NOTHING" if has_pk else "has no primary key and REPLICA IDENTITY NOTHING"
        fix = "ALTER TABLE ... REPLICA IDENTITY DEFAULT" if has_pk else "add a primary key or ALTER TABLE ... REPLICA IDENTITY FULL"
    elif replident == "d" and not has_pk:
        why, fix = "has no primary key and REPLICA IDENTITY DEFAULT", "add a primary key or ALTER TABLE ... REPLICA IDENTITY FULL"
    else:
        return None
    return (
        f"table {schema}.{table} {why}: only its inserts can be captured (PostgreSQL rejects its updates and deletes "
        f"while it is published). Fix: {fix}."
    )


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
        check_publication_privileges(conn, name, mode, wanted, creating=True)
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
        check_publication_privileges(conn, name, mode, wanted, creating=False)
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


def release_slot_lock(conn: psycopg.Connection) -> None:
    """Release the slot's advisory lock before closing: the server frees a closed session's locks only when its
    backend has exited, so a run started right after this one (a stream after a failed setup, a retry) could
    otherwise still find the slot taken."""
    if conn.closed or conn.broken:
        return
    try:
        conn.execute("SELECT pg_advisory_unlock_all()")
    except psycopg.Error:
        pass  # the session ends anyway


def lake_lock_key(connector: str) -> str:
    return f"walflow:lake:{connector}"


@contextmanager
def lake_lock(conninfo: str, connector: str, wait_seconds: float, poll_seconds: float = 5.0) -> Iterator[bool]:
    """Hold the connector's lake lock (a session advisory lock on the source database) while the block runs, so
    that its lake apply and its lake maintenance never overlap: maintenance commits rewrites that must not race a
    MERGE, and expires snapshots a running apply may still read.

    Yields True once the lock is held, or False when another task held it for ``wait_seconds`` (the block must
    then leave the lake alone). The lock goes with the session: a task that dies releases it.
    """
    with connect(conninfo, application_name="walflow-lake-lock") as conn:
        deadline = time.monotonic() + wait_seconds
        key = lake_lock_key(connector)
        while True:
            row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (key,)).fetchone()
            if row and row[0]:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                yield False
                return
            time.sleep(min(poll_seconds, left))
        try:
            yield True
        finally:
            try:
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))
            except psycopg.Error:
                pass  # the session is gone, and its lock with it


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
    check_select_privilege(conn, [(schema, table, oid) for schema, table, oid, *_ in tables])
    for schema, table, _oid, replident, has_pk in tables:
        report.captured_tables.append(f"{schema}.{table}")
        warning = replica_identity_warning(schema, table, replident, has_pk)
        if warning:
            report.warnings.append(warning)
    published = {(s, t) for s, t, *_ in tables}
    if config.signal_table:
        published.add(config.signal_table)
    ensure_publication(conn, config, published, report)
    open_messages = conn.execute(
        "SELECT has_function_privilege('public', 'pg_catalog.pg_logical_emit_message(boolean, text, text)', 'EXECUTE')"
    ).fetchone()
    if open_messages and open_messages[0]:
        report.warnings.append(
            "any login of this database may write logical decoding messages into the WAL the connector reads "
            "(EXECUTE on pg_logical_emit_message is granted to PUBLIC), and one too large for a Kafka record stops "
            "every batch: run include/sql/roles.sql, which revokes it from PUBLIC and grants it to the connector's role, "
            "or set walflow.message.oversized.handling.mode: skip"
        )
    for warning in report.warnings:
        log.warning("%s", warning)
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
    return report


