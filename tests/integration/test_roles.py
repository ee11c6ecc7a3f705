"""The least-privilege role of include/sql/roles.sql runs the whole connector: setup with a filtered
publication and an initial snapshot, streaming, and an incremental snapshot with its watermarks."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support import connector, producer, read_topic, replay, stream, unique
from walflow.setup import ConnectorSetup

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def connector_role(database: str) -> Iterator[dict[str, str]]:
    """Apply include/sql/roles.sql with psql as the superuser; yield the new role's DSN."""
    role = unique("walflow_role").lower()
    owners = f"{role}_owners"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL)")
        conn.execute("CREATE TABLE audit (id int PRIMARY KEY, note text)")  # not captured: keeps its owner
        conn.execute("INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 250) g")
    params = dict(p.split("=", 1) for p in database.split())
    bindir = Path(os.environ.get("WALFLOW_PG_BINDIR", ""))
    psql = str(bindir / "psql") if (bindir / "psql").exists() else "psql"
    result = subprocess.run(
        [psql, "-X", "-q", "-h", params["host"], "-p", params["port"], "-U", params["user"], "-d", params["dbname"],
         "-v", f"role={role}", "-v", "password=s3cret-for-tests", "-v", f"owners={owners}", "-v", "schema=public",
         "-v", "tables=public.customers", "-f", str(ROOT / "include" / "sql" / "roles.sql")],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    role_dsn = " ".join([*(p for p in database.split() if not p.startswith("user=")), f"user={role}", "password=s3cret-for-tests"])
    try:
        yield {"dsn": role_dsn, "role": role, "owners": owners}
    finally:
        with psycopg.connect(database, autocommit=True) as conn:
            for slot in conn.execute("SELECT slot_name FROM pg_replication_slots WHERE database = current_database()").fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", slot)
            conn.execute(f'REASSIGN OWNED BY "{role}", "{owners}" TO CURRENT_USER')
            conn.execute(f'DROP OWNED BY "{role}", "{owners}"')
            conn.execute(f'DROP ROLE "{role}"')
            conn.execute(f'DROP ROLE "{owners}"')


def test_least_privilege_role_runs_setup_stream_and_incremental_snapshot(database: str, connector_role: dict[str, str]) -> None:
    dsn = connector_role["dsn"]
    with psycopg.connect(dsn) as conn:
        flags = conn.execute("SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user").fetchone()
    assert flags == (False, True), "the test must run as the non-superuser replication role"
    config = connector(
        unique("priv"),
        **{
            "table.include.list": "public.customers",
            "publication.autocreate.mode": "filtered",
            "signal.data.collection": "public.walflow_signal",
            "incremental.snapshot.chunk.size": 100,
        },
    )
    report = ConnectorSetup(config, dsn, producer).run()
    assert report["snapshot"]["rows"] == 250

    # the application (the tables' former owner) keeps writing as before
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("UPDATE customers SET name = 'renamed' WHERE id <= 10")
        conn.execute("DELETE FROM customers WHERE id > 240")
        conn.execute("INSERT INTO customers VALUES (1000, 'new')")
        conn.execute("INSERT INTO walflow_signal VALUES ('adhoc-1', 'execute-snapshot', '{\"data-collections\": [\"public.customers\"]}')")
    for _ in range(50):
        summary = stream(config, dsn)
        if summary.events == 0 and summary.snapshot_rows == 0:
            break
    records = read_topic(f"{config.topic_prefix}.public.customers")
    assert sum(1 for r in records if r.op == "r") >= 250 + 241  # initial snapshot, then the incremental one
    with psycopg.connect(database) as conn:
        source = {row[0]: row[1] for row in conn.execute("SELECT id, name FROM customers")}
    assert {v["id"]: v["name"] for v in replay(records).values()} == source
    assert not read_topic(f"{config.topic_prefix}.public.audit")
