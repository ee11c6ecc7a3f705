"""Connections to the source database and the server's checks: every session walflow opens to read the database
gets the settings its text parsing relies on, the connector's initial statements, and a UTF8 check.

Everything here is plain psycopg 3. Airflow's hook only supplies the connection string; the checks are the same
whether an operator, a test or a user's script calls them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from walflow.config.connector import ConnectorConfig
from walflow.errors import SourceError, SourceUnavailableError
from walflow.source.queries import use_cursors

log = logging.getLogger(__name__)

#: The oldest server walflow runs against. What sets it, newest first: the initial snapshot creates its slot with
#: ``CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')`` (15; 14 only knows ``EXPORT_SNAPSHOT``), watermarks and
#: the ``messages`` option of pgoutput (14), ``pg_replication_slots.wal_status`` (13), ``hashtextextended`` and
#: ``pg_replication_slot_advance`` (11).
MIN_SERVER_VERSION = 150000
MESSAGES_SERVER_VERSION = 140000
#: Session settings under which PostgreSQL's text output is what the converters expect.
SESSION_SETTINGS = {
    "DateStyle": "ISO, YMD",
    "IntervalStyle": "iso_8601",
    "lc_monetary": "C",
    "TimeZone": "UTC",
    "extra_float_digits": "3",
    "bytea_output": "hex",
}


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
    **kwargs: Any,  # libpq connection parameters, passed to psycopg.connect
) -> psycopg.Connection:
    """Open a connection whose text output is what :mod:`walflow.records.convert` expects.

    :param initial_statements: the connector's ``database.initial.statements``, run on every connection walflow
        opens to read the database (not on the replication connection that creates a slot, as in Debezium).
    :raises SourceError: when the server cannot be reached or an initial statement fails.
    """
    try:
        conn = use_cursors(
            psycopg.connect(conninfo, autocommit=autocommit, application_name=application_name, **kwargs)
        )
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
                    f"'database.initial.statements' statement {statement!r} failed: {str(exc).strip()}. Fix or remove "
                    "it in the connector's YAML."
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
            "database's encoding, and change events are "
            f"UTF-8{', which SQL_ASCII cannot be converted to' if encoding.upper() == 'SQL_ASCII' else ''}). Capture a "
            "UTF8 database: create one (CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0) and move the data "
            "there"
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
    #: a hot standby (logical decoding there needs PostgreSQL 16, and hot_standby_feedback)
    in_recovery: bool
    hot_standby_feedback: bool


def server_info(conn: psycopg.Connection) -> ServerInfo:
    with conn.cursor() as cur:
        cur.execute(
            """
            SELECT current_setting('server_version_num')::int, current_setting('server_version'),
                   current_setting('wal_level'), current_setting('max_replication_slots')::int,
                   (SELECT count(*) FROM pg_replication_slots), current_database(), current_user,
                   r.rolsuper,
                   -- Amazon RDS and Aurora give replication through membership in rds_replication, not the attribute
                   r.rolreplication OR EXISTS (SELECT FROM pg_roles g WHERE g.rolname = 'rds_replication'
                                               AND pg_has_role(current_user, g.oid, 'MEMBER')),
                   pg_is_in_recovery(), current_setting('hot_standby_feedback') = 'on'
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
            f"role {info.user!r} has neither REPLICATION nor SUPERUSER; grant it with ALTER ROLE {info.user} "
            "REPLICATION as a superuser (see walflow's roles.sql), on Amazon RDS and Aurora with GRANT "
            f"rds_replication TO {info.user}, on Cloud SQL and Azure with ALTER ROLE ... REPLICATION as the service's "
            "administrator role (docs/operations.md)"
        )
    if config.slot_failover and info.version_num < 170000:
        raise SourceError(
            f"'slot.failover: true' needs PostgreSQL 17 or newer (failover slots); this server is {info.version}. "
            "Leave the key out: after a failover the setup then re-reads the tables into a new slot ('when_needed')"
        )
    if info.in_recovery:
        if info.version_num < 160000:
            raise SourceError(
                f"this server is a standby running PostgreSQL {info.version}; logical decoding on a standby needs "
                "PostgreSQL 16 or newer. Point the connector's Connection at the primary, or upgrade"
            )
        if not info.hot_standby_feedback:
            raise SourceError(
                "this server is a standby with hot_standby_feedback off: the primary's vacuum would remove catalog "
                "rows the connector's slot still needs, and the server would invalidate the slot. Set "
                "hot_standby_feedback = on (and primary_slot_name) on the standby and reload it"
            )
    if creating_slot and info.used_replication_slots >= info.max_replication_slots:
        raise SourceError(
            f"all {info.max_replication_slots} replication slots are in use (max_replication_slots); raise "
            "max_replication_slots and restart, or drop an unused slot with pg_drop_replication_slot()"
        )
    return info


#: the end of the server's WAL as ``pg_current_wal_lsn()`` gives it on a primary; on a hot standby (where that
#: function fails) the WAL replayed so far
CURRENT_WAL_LSN_SQL = "(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)"


def server_timeline(conn: psycopg.Connection) -> int:
    """The server's WAL timeline: a standby promoted to primary starts a new one, so the same WAL position on either
    side of a failover can hold different transactions. A primary's is the one it writes (from the name of its
    current WAL file, known as soon as a promotion ends); a standby's that of its last restartpoint."""
    row = conn.execute(
        "SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint()) "
        "ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END"
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0
