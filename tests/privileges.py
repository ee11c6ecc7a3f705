"""The least-privilege role of ``include/sql/roles.sql``, applied with psql the way an administrator would.

Tests that run the connector as that role (not as a superuser) use :func:`connector_role`; the tables named
in ``tables`` must exist before, since the script hands their ownership to the role's owner group.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "s3cret-for-tests"


@dataclass(frozen=True)
class ConnectorRole:
    """A LOGIN REPLICATION role and its NOLOGIN owner group, with the role's DSN."""

    dsn: str
    role: str
    owners: str


def _psql() -> str:
    bindir = Path(os.environ.get("WALFLOW_PG_BINDIR", ""))
    return str(bindir / "psql") if (bindir / "psql").exists() else "psql"


@contextmanager
def connector_role(superuser_dsn: str, tables: str, schema: str = "public") -> Iterator[ConnectorRole]:
    """Apply ``include/sql/roles.sql`` to the database of ``superuser_dsn`` for ``tables`` (comma-separated,
    schema-qualified); yield the role; afterwards drop the slots, hand back what the roles own and drop them."""
    role = f"walflow_role_{uuid.uuid4().hex[:6]}"
    owners = f"{role}_owners"
    params = dict(p.split("=", 1) for p in superuser_dsn.split())
    result = subprocess.run(
        [_psql(), "-X", "-q", "-h", params["host"], "-p", params["port"], "-U", params["user"], "-d", params["dbname"],
         "-v", f"role={role}", "-v", f"password={PASSWORD}", "-v", f"owners={owners}", "-v", f"schema={schema}",
         "-v", f"tables={tables}", "-f", str(ROOT / "include" / "sql" / "roles.sql")],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    dsn = " ".join([*(p for p in superuser_dsn.split() if not p.startswith(("user=", "password="))), f"user={role}", f"password={PASSWORD}"])
    try:
        yield ConnectorRole(dsn=dsn, role=role, owners=owners)
    finally:
        with psycopg.connect(superuser_dsn, autocommit=True) as conn:
            for (slot,) in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()"
            ).fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            names = sql.SQL(", ").join([sql.Identifier(role), sql.Identifier(owners)])
            conn.execute(sql.SQL("REASSIGN OWNED BY {} TO CURRENT_USER").format(names))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(names))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(owners)))
