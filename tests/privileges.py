"""The least-privilege roles of ``walflow/source/sql/roles.sql``, applied with psql the way an administrator would.

Every test database gets them (the ``database`` fixture calls :func:`create_database_role`): the integration
tests' fixture SQL (tables, workloads) runs as the superuser, the connector under test as the connector role, whose
DSN :func:`as_connector` gives, and signals' conditions as the reader role (:func:`as_reader`). A 'filtered'
publication needs the captured tables owned by a group of the connector role, which :func:`hand_over` gets by
running roles.sql again for them; an 'all_tables' one can only be created by a superuser (:func:`publish_all_tables`).

Tests that need a role of their own, made once their tables exist, use :func:`connector_role`; the tables named
in ``tables`` must exist before, since the script hands their ownership to the role's owner group.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import sql

from sandbox.embedded import run_roles_sql

PASSWORD = "s3cret-for-tests"


@dataclass(frozen=True)
class ConnectorRole:
    """A LOGIN REPLICATION role, with its DSN."""

    dsn: str
    role: str


def _params(dsn: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in dsn.split())


def _with_user(dsn: str, role: str) -> str:
    """``dsn`` with ``role`` (and the tests' password) as its user."""
    return " ".join(
        [*(p for p in dsn.split() if not p.startswith(("user=", "password="))), f"user={role}", f"password={PASSWORD}"]
    )


def apply_roles_sql(
    superuser_dsn: str, role: str, tables: str, schema: str = "public", password: str = PASSWORD, **variables: str
) -> None:
    """Run walflow/source/sql/roles.sql with psql as the superuser of ``superuser_dsn`` (its password, if any, from the
    DSN), with ``password`` for the connector role, the tests' for the reader, and ``variables`` as further psql
    variables."""
    if "reader" in variables:
        variables.setdefault("reader_password", PASSWORD)
    result = run_roles_sql(
        superuser_dsn, {"role": role, "password": password, "schema": schema, "tables": tables, **variables}
    )
    assert result.returncode == 0, result.stderr


# -- the connector role of every test database -------------------------------------------------------------------
def database_role(dsn_or_dbname: str) -> str:
    """The connector role of a test database (given by a DSN or its name); its owner groups are
    ``<role>_owns_<owner>``, its reader role :func:`reader_role`."""
    dbname = _params(dsn_or_dbname)["dbname"] if "=" in dsn_or_dbname else dsn_or_dbname
    return f"{dbname}_cdc"


def reader_role(dsn_or_dbname: str) -> str:
    """The role that evaluates signals' conditions in a test database (roles.sql's ``reader``)."""
    return database_role(dsn_or_dbname).removesuffix("_cdc") + "_reader"


def create_database_role(superuser_dsn: str) -> None:
    """Apply roles.sql to the new, empty test database of ``superuser_dsn`` (schema public, no tables yet), then let
    the roles read what the superuser creates later: the tests create their tables after this, and an
    administrator would run roles.sql (or GRANT SELECT) once they exist. Default privileges stand in for that:
    SELECT on every table and USAGE on every schema the superuser creates in this database, nothing more."""
    role, reader = database_role(superuser_dsn), reader_role(superuser_dsn)
    apply_roles_sql(superuser_dsn, role, tables="", reader=reader)
    with psycopg.connect(superuser_dsn, autocommit=True) as conn:
        for name in (role, reader):
            conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES GRANT USAGE ON SCHEMAS TO {}").format(sql.Identifier(name)))


def drop_database_role(dbname: str) -> None:
    """Drop the roles of :func:`create_database_role` and the owner groups roles.sql made for the connector role,
    once their database is dropped (which took what they owned)."""
    role = database_role(dbname)
    with psycopg.connect(os.environ["WALFLOW_PG_DSN"], autocommit=True) as conn:
        groups = [
            r
            for (r,) in conn.execute(
                "SELECT rolname FROM pg_roles WHERE starts_with(rolname, %s)", (f"{role}_owns_",)
            ).fetchall()
        ]
        for name in (*groups, role, reader_role(dbname)):
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def as_connector(dsn: str) -> str:
    """The DSN the connector under test uses: for a test database's superuser DSN (the ``database`` fixture's),
    the same database as its least-privilege role (:func:`database_role`). Any other user's DSN (a role a test
    made itself) is returned as it is."""
    superuser = _params(os.environ["WALFLOW_PG_DSN"])["user"]
    if _params(dsn).get("user") != superuser:
        return dsn
    return _with_user(dsn, database_role(dsn))


def as_reader(dsn: str) -> str:
    """The DSN of the reader role of a test database (given by its superuser DSN): signals' conditions run as it."""
    return _with_user(dsn, reader_role(dsn))


def hand_over(superuser_dsn: str, *tables: str) -> None:
    """Run roles.sql again for ``tables`` (SQL names, e.g. ``public.a`` or ``"Odd.Name"``), as an administrator does
    for tables captured later: their owner's group of the connector role takes them (a 'filtered' publication may
    only name tables its creator owns), and the roles get SELECT on them."""
    apply_roles_sql(
        superuser_dsn, database_role(superuser_dsn), tables=",".join(tables), reader=reader_role(superuser_dsn)
    )


def publish_all_tables(superuser_dsn: str, publication: str, via_root: bool = False) -> None:
    """Create ``publication`` FOR ALL TABLES as the superuser unless it exists: PostgreSQL lets only a superuser
    create one, so with publication.autocreate.mode 'all_tables' a DBA does it and the connector (as its role)
    finds and checks it."""
    with psycopg.connect(superuser_dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone() is None:
            options = sql.SQL(" WITH (publish_via_partition_root = true)" if via_root else "")
            conn.execute(sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES{}").format(sql.Identifier(publication), options))


@contextmanager
def connector_role(superuser_dsn: str, tables: str, schema: str = "public") -> Iterator[ConnectorRole]:
    """Apply ``walflow/source/sql/roles.sql`` to the database of ``superuser_dsn`` for ``tables`` (comma-separated,
    schema-qualified); yield the role; afterwards drop the slots, hand back what the roles own and drop them."""
    role = f"walflow_role_{uuid.uuid4().hex[:6]}"
    apply_roles_sql(superuser_dsn, role, tables, schema)
    dsn = _with_user(superuser_dsn, role)
    try:
        yield ConnectorRole(dsn=dsn, role=role)
    finally:
        with psycopg.connect(superuser_dsn, autocommit=True) as conn:
            for (slot,) in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()"
            ).fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            groups = [
                r
                for (r,) in conn.execute(
                    "SELECT rolname FROM pg_roles WHERE starts_with(rolname, %s)", (f"{role}_owns_",)
                ).fetchall()
            ]
            names = sql.SQL(", ").join([sql.Identifier(n) for n in (role, *groups)])
            conn.execute(sql.SQL("REASSIGN OWNED BY {} TO CURRENT_USER").format(names))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(names))
            for name in (role, *groups):
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
