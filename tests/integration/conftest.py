"""Fixtures of the integration tests that several modules use."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.privileges import PASSWORD, apply_roles_sql
from tests.support import unique

SIGNALS = "public.walflow_signal"


@pytest.fixture()
def connector_role(database: str) -> Iterator[dict[str, str]]:
    """Apply walflow/source/sql/roles.sql with psql as the superuser, for two tables that two applications' roles own,
    with the signal table, a signal-writer role and a reader role; yield the new roles' DSNs and the connector
    role's password (unique to the test)."""
    role = unique("walflow_role").lower()
    writers, reader = f"{role}_signals", f"{role}_reader"
    apps = (f"{role}_app_a", f"{role}_app_b")
    password = f"pw-{uuid.uuid4().hex}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL)")
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer int)")
        conn.execute("CREATE TABLE audit (id int PRIMARY KEY, note text)")  # not captured: keeps its owner
        conn.execute("INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 250) g")
        for app in apps:
            conn.execute(f"CREATE ROLE \"{app}\" LOGIN PASSWORD '{PASSWORD}'")
        # two applications, each owning its tables
        conn.execute(f'ALTER TABLE customers OWNER TO "{apps[0]}"')
        conn.execute(f'ALTER TABLE audit OWNER TO "{apps[0]}"')
        conn.execute(f'ALTER TABLE orders OWNER TO "{apps[1]}"')
        conn.execute(
            f"CREATE ROLE \"{writers}\" LOGIN PASSWORD '{PASSWORD}'"
        )  # the trusted users who may start ad-hoc snapshots
    roles_sql = lambda **extra: apply_roles_sql(  # noqa: E731
        database,
        role,
        "public.customers,public.orders",
        password=password,
        reader=reader,
        signal_table=SIGNALS,
        signal_writers=writers,
        **extra,
    )
    roles_sql()
    roles_sql()  # safe to run again
    base = [p for p in database.split() if not p.startswith(("user=", "password="))]
    as_user = lambda user, pw=PASSWORD: " ".join([*base, f"user={user}", f"password={pw}"])  # noqa: E731
    try:
        yield {
            "dsn": as_user(role, password),
            "writer_dsn": as_user(writers),
            "reader_dsn": as_user(reader),
            "app_a_dsn": as_user(apps[0]),
            "app_b_dsn": as_user(apps[1]),
            "role": role,
            "password": password,
        }
    finally:
        with psycopg.connect(database, autocommit=True) as conn:
            for slot in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()"
            ).fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", slot)
            groups = [
                r
                for (r,) in conn.execute(
                    "SELECT rolname FROM pg_roles WHERE starts_with(rolname, %s)", (f"{role}_owns_",)
                ).fetchall()
            ]
            names = ", ".join(f'"{n}"' for n in (role, *groups, writers, reader, *apps))
            conn.execute(f"REASSIGN OWNED BY {names} TO CURRENT_USER")
            conn.execute(f"DROP OWNED BY {names}")
            for name in (role, *groups, writers, reader, *apps):
                conn.execute(f'DROP ROLE "{name}"')
