"""The source's part of a connector's setup: the server checks, the publication and (unless the caller creates it
with an exported snapshot) the slot. Idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from walflow.config.connector import ConnectorConfig
from walflow.config.filters import Filters
from walflow.errors import SourceError
from walflow.source.connection import check_server, quote_table
from walflow.source.publication import (
    check_publication_privileges,
    check_select_privilege,
    list_tables,
    publication_tables,
    replica_identity_warning,
)
from walflow.source.slot import check_slot, create_slot, slot_info

log = logging.getLogger(__name__)


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
    if existing is None and config.read_only:
        listed = ", ".join(f"{s}.{t}" for s, t in sorted(wanted)) or "..."
        raise SourceError(
            f"publication {name!r} does not exist, and with 'read.only: true' walflow creates nothing in the source: "
            f"create it on the primary as the tables' owner (CREATE PUBLICATION {name} FOR TABLE {listed}), then run "
            "the setup again (a standby receives it through replication)"
        )
    if existing is None:
        if mode == "disabled":
            raise SourceError(
                f"publication {name!r} does not exist and 'publication.autocreate.mode' is 'disabled'; create it "
                f"(CREATE PUBLICATION {name} FOR TABLE ...) or set the mode to 'filtered' or 'all_tables'"
            )
        check_publication_privileges(conn, name, mode, wanted, creating=True)
        options = sql.SQL(" WITH (publish_via_partition_root = true)" if config.publish_via_partition_root else "")
        try:
            with conn.cursor() as cur:
                if mode == "all_tables":
                    cur.execute(sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES{}").format(sql.Identifier(name), options))
                else:
                    if not wanted:
                        raise SourceError(
                            f"'publication.autocreate.mode' is 'filtered' but no table matches the include/exclude "
                            f"lists, so publication {name!r} would be empty; check 'table.include.list'"
                        )
                    cur.execute(
                        sql.SQL("CREATE PUBLICATION {} FOR TABLE {}{}").format(
                            sql.Identifier(name),
                            sql.SQL(", ").join(quote_table(s, t) for s, t in sorted(wanted)),
                            options,
                        )
                    )
        except psycopg.errors.InsufficientPrivilege as exc:
            raise SourceError(
                f"cannot create publication {name!r}: {exc.diag.message_primary}. 'all_tables' needs a superuser; "
                "'filtered' needs ownership of the captured tables (see walflow's roles.sql), or create the "
                "publication yourself and set 'publication.autocreate.mode: disabled'"
            ) from None
        report.publication_created = True
        log.info("created publication %s (%s)", name, mode)
        return
    all_tables, all_ops, published = existing
    via_root = conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
    if via_root is not None and bool(via_root[0]) != config.publish_via_partition_root:
        report.warnings.append(
            f"publication {name!r} has publish_via_partition_root = {str(bool(via_root[0])).lower()}, and "
            f"'publish.via.partition.root' is {str(config.publish_via_partition_root).lower()}: partitions' changes go "
            f"to {'their root' if via_root[0] else 'their own'} table's topic. Run ALTER PUBLICATION {name} SET "
            f"(publish_via_partition_root = {str(config.publish_via_partition_root).lower()}) as its owner, or change "
            "the setting"
        )
    if not all_ops:
        report.warnings.append(f"publication {name!r} does not publish every operation (insert, update, delete)")
    if mode == "filtered" and not all_tables and published != wanted and not config.read_only:
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


#: pg_class.relreplident of each replica identity ``replica.identity.autoset.values`` names
_IDENTITY_CODES = {"DEFAULT": "d", "FULL": "f", "NOTHING": "n", "INDEX": "i"}
_IDENTITY_CLAUSES = {
    "DEFAULT": sql.SQL("REPLICA IDENTITY DEFAULT"),
    "FULL": sql.SQL("REPLICA IDENTITY FULL"),
    "NOTHING": sql.SQL("REPLICA IDENTITY NOTHING"),
}


def apply_replica_identities(
    conn: psycopg.Connection, config: ConnectorConfig, tables: list[tuple[str, str, int, str, bool]]
) -> bool:
    """Give the captured tables ``replica.identity.autoset.values`` names (``<table regex>:<identity>``, the first
    pattern that matches a table's ``schema.table`` wins) the identity it names, as Debezium does when it starts;
    whether any table changed. A table already so is left alone.

    :raises SourceError: naming the table, when the connector's role may not alter it (it must own the table) or the
        index does not exist or cannot be an identity.
    """
    from walflow.config.patterns import Pattern

    rules = [
        (Pattern(t, "'replica.identity.autoset.values'"), identity)
        for t, identity in config.replica_identity_autoset_values
    ]
    changed = False
    for schema, table, oid, replident, _has_pk in tables:
        identity = next((i for pattern, i in rules if pattern.fullmatch(f"{schema}.{table}")), None)
        if identity is None:
            continue
        kind, _, index = identity.partition(" ")
        kind = kind.upper()
        if kind == "INDEX":
            row = conn.execute(
                "SELECT i.indisreplident FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE i.indrelid = %s AND c.relname = %s",
                (oid, index.strip()),
            ).fetchone()
            if row is not None and row[0]:
                continue
            clause: sql.Composable = sql.SQL("REPLICA IDENTITY USING INDEX {}").format(sql.Identifier(index.strip()))
        elif replident == _IDENTITY_CODES[kind]:
            continue
        else:
            clause = _IDENTITY_CLAUSES[kind]
        statement = sql.SQL("ALTER TABLE {} {}").format(sql.Identifier(schema, table), clause)
        try:
            conn.execute(statement)
        except psycopg.Error as exc:
            raise SourceError(
                f"'replica.identity.autoset.values' gives {schema}.{table} the replica identity {identity}, and "
                f"PostgreSQL refused: {exc.diag.message_primary or exc}. The connector's role must own the table (or "
                f"run ALTER TABLE {schema}.{table} REPLICA IDENTITY ... as its owner and drop the entry)"
            ) from None
        log.info("replica identity of %s.%s set to %s (replica.identity.autoset.values)", schema, table, identity)
        changed = True
    return changed


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
    guardrail = config.check_guardrail(len(tables))
    if guardrail:
        log.warning("%s", guardrail)
    check_select_privilege(conn, [(schema, table, oid) for schema, table, oid, *_ in tables])
    if config.replica_identity_autoset_values and apply_replica_identities(conn, config, tables):
        tables = list_tables(conn, filters)
    for schema, table, _oid, replident, has_pk in tables:
        report.captured_tables.append(f"{schema}.{table}")
        warning = replica_identity_warning(schema, table, replident, has_pk)
        if warning:
            report.warnings.append(warning)
    published = {(s, t) for s, t, *_ in tables}
    if config.signal_table:
        published.add(config.signal_table)
    ensure_publication(conn, config, published, report)
    # who may write logical decoding messages, over every overload (PostgreSQL 17 added a fourth argument, flush),
    # and the overload with text content as the server declares it, for the grant to name
    row = conn.execute(
        "SELECT bool_or(has_function_privilege('public', p.oid, 'EXECUTE')), "
        "bool_or(has_function_privilege(current_user, p.oid, 'EXECUTE')), "
        "min(p.oid::regprocedure::text) FILTER (WHERE p.proargtypes[2] = 'text'::regtype) FROM pg_proc p "
        "WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace"
    ).fetchone()
    assert row is not None  # aggregates without GROUP BY return their row
    open_messages, writes_messages, text_overload = row
    if open_messages:
        report.warnings.append(
            "any login of this database may write logical decoding messages into the WAL the connector reads "
            "(EXECUTE on pg_logical_emit_message is granted to PUBLIC), and one too large for a Kafka record stops "
            "every batch: run walflow's roles.sql, which revokes it from PUBLIC and grants it to the connector's role, "
            "or set walflow.message.oversized.handling.mode: skip"
        )
    if not config.read_only and not writes_messages:
        # incremental snapshots' watermarks are logical decoding messages (read.only needs none)
        report.warnings.append(
            f"role {info.user!r} may not execute pg_logical_emit_message, which writes incremental snapshots' "
            f"watermarks: they will fail. GRANT EXECUTE ON FUNCTION {text_overload} TO {info.user} "
            "(walflow's roles.sql does), or set 'read.only: true', whose watermarks need no write"
        )
    for warning in report.warnings:
        log.warning("%s", warning)
    slot = check_slot(conn, config, info.database, missing_ok=True)
    report.slot = config.slot_name
    if slot is None and not create_slot_now:
        return report
    if slot is None:
        report.slot_confirmed_lsn = create_slot(conn, config.slot_name, config.slot_failover)
        report.slot_created = True
        log.info("created replication slot %s at %s", config.slot_name, report.slot_confirmed_lsn)
    else:
        report.slot_confirmed_lsn = slot.confirmed_flush_lsn
    return report
