"""What the source says about the tables a connector captures and its publication: which tables the filters select,
what the publication publishes, the privileges to read and publish them, and their replica identity. Read only: the
changes setup makes are in :mod:`walflow.source.prepare`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import psycopg
from psycopg import sql

from walflow.config.connector import ConnectorConfig
from walflow.config.filters import Filters
from walflow.errors import SourceError

log = logging.getLogger(__name__)


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


#: the tables a publication holds, from the catalogs alone: the tables it names, those of the schemas it names, the
#: partitions of its partitioned tables (unless it publishes through the partition root) and the ancestors of its
#: partitions (whose changes count as published too). Not the pg_publication_tables view: from PostgreSQL 18 it
#: opens every table (publish_generated_columns), so a table another session holds in ACCESS EXCLUSIVE mode (an
#: ALTER TABLE, a VACUUM FULL) would stall the setup or the batch behind it, with no timeout.
_PUBLISHED_SQL = """
WITH RECURSIVE pub AS (SELECT oid, pubviaroot FROM pg_publication WHERE pubname = %s),
named AS (
    SELECT pr.prrelid AS relid FROM pg_publication_rel pr JOIN pub ON pr.prpubid = pub.oid
    UNION
    SELECT c.oid FROM pg_publication_namespace pn JOIN pub ON pn.pnpubid = pub.oid
    JOIN pg_class c ON c.relnamespace = pn.pnnspid AND c.relkind IN ('r', 'p')
),
down AS (
    SELECT relid FROM named
    UNION
    SELECT i.inhrelid FROM pg_inherits i JOIN down d ON i.inhparent = d.relid WHERE NOT (SELECT pubviaroot FROM pub)
),
up AS (
    SELECT relid FROM named
    UNION
    SELECT i.inhparent FROM pg_inherits i JOIN up u ON i.inhrelid = u.relid
    JOIN pg_class c ON c.oid = u.relid AND c.relispartition
)
SELECT n.nspname, c.relname FROM (SELECT relid FROM down UNION SELECT relid FROM up) r
JOIN pg_class c ON c.oid = r.relid JOIN pg_namespace n ON n.oid = c.relnamespace
"""


def publication_tables(conn: psycopg.Connection, name: str) -> tuple[bool, bool, set[tuple[str, str]]] | None:
    """Return (puballtables, publishes-all-operations, {(schema, table)}) or ``None`` if it does not exist; the
    tables of a ``FOR ALL TABLES`` publication are not listed (every table is published). Read from the catalogs
    without opening any table (:data:`_PUBLISHED_SQL`)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT puballtables, pubinsert AND pubupdate AND pubdelete FROM pg_publication WHERE pubname = %s", (name,)
        )
        row = cur.fetchone()
        if row is None:
            return None
        if row[0]:
            return True, bool(row[1]), set()
        cur.execute(_PUBLISHED_SQL, (name,))
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
    ``ALTER``, of the publication). Membership of the owning role counts, which is what walflow's roles.sql sets up.
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
            f"(GRANT CREATE ON DATABASE {database} TO {user}; see walflow's roles.sql), or create the publication "
            "yourself and set 'publication.autocreate.mode: disabled'"
        )
    if creating and mode == "all_tables":
        raise SourceError(
            f"role {user!r} may not create publication {name!r} FOR ALL TABLES: PostgreSQL allows that to superusers "
            "only. Use 'publication.autocreate.mode: filtered' (the role must own the captured tables, see "
            "walflow's roles.sql), or let a superuser create the publication and set the mode to 'disabled'"
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
            f"role {user!r} may not {'create' if creating else 'alter'} the 'filtered' publication {name!r}: it does "
            f"not own table(s) {_names(foreign)}, and PostgreSQL lets only a table's owner add it to a publication. "
            "Hand the tables to a group the role belongs to (walflow's roles.sql does), or create the publication as "
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
        row = cur.fetchone()
        assert row is not None  # a SELECT without FROM returns its row
        user = row[0]
    no_usage = sorted({oids[o][0] for o, _select, usage in rows if not usage})
    if no_usage:
        schemas = ", ".join(sql.Identifier(n).as_string(conn) for n in no_usage)
        raise SourceError(
            f"role {user!r} lacks USAGE on schema(s) {schemas} of captured tables, so it cannot read them even with "
            f"SELECT. Grant it (GRANT USAGE ON SCHEMA {schemas} TO {user}; walflow's roles.sql does for every "
            "captured table's schema) or leave the tables out with 'table.exclude.list'"
        )
    denied = {oids[o] for o, select, _usage in rows if not select}
    if denied:
        raise SourceError(
            f"role {user!r} lacks SELECT on captured table(s) {_names(denied)}; snapshots read them. Grant it "
            f"(GRANT SELECT ON {_names(denied)} TO {user}; see walflow's roles.sql) or leave the tables out with "
            "'table.exclude.list'"
        )


def replica_identity_warning(schema: str, table: str, replident: str, has_pk: bool) -> str | None:
    """The warning setup gives for a captured table whose updates or deletes cannot be captured, or ``None``.

    PostgreSQL rejects UPDATE and DELETE on a table published for them unless the table has a replica identity:
    REPLICA IDENTITY DEFAULT without a primary key, and NOTHING in any case, leave it without one.
    """
    if replident == "n":
        why = (
            "has a primary key but REPLICA IDENTITY NOTHING"
            if has_pk
            else "has no primary key and REPLICA IDENTITY NOTHING"
        )
        fix = (
            "ALTER TABLE ... REPLICA IDENTITY DEFAULT"
            if has_pk
            else "add a primary key or ALTER TABLE ... REPLICA IDENTITY FULL"
        )
    elif replident == "d" and not has_pk:
        why, fix = (
            "has no primary key and REPLICA IDENTITY DEFAULT",
            "add a primary key or ALTER TABLE ... REPLICA IDENTITY FULL",
        )
    else:
        return None
    return (
        f"table {schema}.{table} {why}: only its inserts can be captured (PostgreSQL rejects its updates and deletes "
        f"while it is published). Fix: {fix}."
    )
