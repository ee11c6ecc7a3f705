"""The least-privilege role of walflow/source/sql/roles.sql runs the whole connector: setup with a filtered
publication and an initial snapshot, streaming, and an incremental snapshot with its watermarks."""

from __future__ import annotations

import os
import re
from pathlib import Path

import psycopg
import pytest

from tests.privileges import PASSWORD, apply_roles_sql, as_connector, database_role
from tests.support import connector, producer, read_topic, replay, setup, stream, unique
from walflow.capture.setup import ConnectorSetup

ROOT = Path(__file__).resolve().parents[2]
SIGNALS = "public.walflow_signal"


def test_least_privilege_role_runs_setup_stream_and_incremental_snapshot(
    database: str, connector_role: dict[str, str]
) -> None:
    dsn = connector_role["dsn"]
    with psycopg.connect(dsn) as conn:
        flags = conn.execute("SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user").fetchone()
    assert flags == (False, True), "the test must run as the non-superuser replication role"
    config = connector(
        unique("priv"),
        **{
            "table.include.list": "public.customers,public.orders",
            "publication.autocreate.mode": "filtered",
            "signal.data.collection": SIGNALS,
            "incremental.snapshot.chunk.size": 100,
        },
    )
    report = ConnectorSetup(config, dsn, producer).run()
    assert report["snapshot"]["rows"] == 250

    # each application (its tables' former owner) keeps writing its own tables as before
    with psycopg.connect(connector_role["app_a_dsn"], autocommit=True) as conn:
        conn.execute("UPDATE customers SET name = 'renamed' WHERE id <= 10")
        conn.execute("DELETE FROM customers WHERE id > 240")
        conn.execute("INSERT INTO customers VALUES (1000, 'new')")
    with psycopg.connect(connector_role["app_b_dsn"], autocommit=True) as conn:
        conn.execute("INSERT INTO orders VALUES (1, 1000)")
    # the signal writers' role may insert signals (granted by roles.sql), and do nothing else
    with psycopg.connect(connector_role["writer_dsn"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO walflow_signal VALUES ('adhoc-1', 'execute-snapshot',"
            ' \'{"data-collections": ["public.customers"], "additional-condition": "id > 0"}\')'
        )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM customers")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM walflow_signal")
    for _ in range(50):
        summary = stream(config, dsn, reader_conninfo=connector_role["reader_dsn"])
        if summary.events == 0 and summary.snapshot_rows == 0:
            break
    records = read_topic(f"{config.topic_prefix}.public.customers")
    assert sum(1 for r in records if r.op == "r") >= 250 + 241  # initial snapshot, then the incremental one
    with psycopg.connect(database) as conn:
        source = {row[0]: row[1] for row in conn.execute("SELECT id, name FROM customers")}
    assert {v["id"]: v["name"] for v in replay(records).values()} == source
    assert not read_topic(f"{config.topic_prefix}.public.audit")


def test_a_publication_made_by_roles_sql_leaves_the_connector_owning_nothing(database: str) -> None:
    """With -v publication, roles.sql creates the publication itself (its runner owns the tables' rights) and hands
    the connector no ownership: the connector runs with publication.autocreate.mode 'disabled' and streams."""
    role = unique("walflow_pub").lower()
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
    apply_roles_sql(database, role, "public.items", publication=role, signal_table="public.walflow_signal")
    dsn = " ".join(
        [
            *(p for p in database.split() if not p.startswith(("user=", "password="))),
            f"user={role}",
            f"password={PASSWORD}",
        ]
    )
    try:
        with psycopg.connect(database) as conn:
            assert conn.execute("SELECT relowner::regrole::text FROM pg_class WHERE relname = 'items'").fetchone() == (
                "postgres",
            )
            published = conn.execute(
                "SELECT tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1", (role,)
            ).fetchall()
            assert published == [("items",), ("walflow_signal",)]
            assert conn.execute(
                "SELECT count(*) FROM pg_roles WHERE starts_with(rolname, %s)", (f"{role}_owns_",)
            ).fetchone() == (0,)
        config = connector(
            unique("pub"),
            **{
                "slot.name": role,
                "publication.name": role,
                "publication.autocreate.mode": "disabled",
                "table.include.list": "public.items",
                "signal.data.collection": "public.walflow_signal",
            },
        )
        ConnectorSetup(config, dsn, producer).run()
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("INSERT INTO items VALUES (1, 'one')")
        assert stream(config, dsn).events == 1
        with psycopg.connect(dsn, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("ALTER TABLE items ADD COLUMN extra text")
    finally:
        with psycopg.connect(database, autocommit=True) as conn:
            for slot in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE slot_name = %s", (role,)
            ).fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", slot)
            conn.execute(f'REASSIGN OWNED BY "{role}" TO CURRENT_USER')
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def test_password_never_reaches_logs_xcom_or_events(
    database: str,
    kafka_bootstrap: str,
    connector_role: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Setup and stream run by Airflow as the least-privilege role, whose password is in the Airflow Connection:
    the password appears in none of the task logs, the XCom values or the Kafka records."""
    import json

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from tests.support import run_dag

    password = connector_role["password"]
    params = dict(p.split("=", 1) for p in database.split())
    name = unique("secret")
    (tmp_path / f"{name}.yaml").write_text(
        "\n".join(
            [
                f"name: {name}",
                f"topic.prefix: {name}",
                f"slot.name: {name}",
                f"publication.name: {name}",
                "publication.autocreate.mode: filtered",
                "table.include.list: public.customers",
                "walflow.lake.enabled: false",
                f"signal.data.collection: {SIGNALS}",
                f"walflow.postgres.conn.id: {name}_pg",
                f"walflow.kafka.conn.id: {name}_kafka",
            ]
        )
    )
    connection = {
        "conn_type": "postgres",
        "host": params["host"],
        "port": int(params["port"]),
        "schema": params["dbname"],
        "login": connector_role["role"],
        "password": password,
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}_PG", json.dumps(connection))
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{name.upper()}_KAFKA",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(tmp_path))

    runs = [run_dag(f"{name}__setup")]
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("UPDATE customers SET name = 'changed' WHERE id <= 5")
    runs.append(run_dag(f"{name}__stream"))
    with psycopg.connect(database) as conn:  # the tasks really ran as the role: it owns what setup created
        assert conn.execute(
            "SELECT pubowner::regrole::text FROM pg_publication WHERE pubname = %s", (name,)
        ).fetchone() == (connector_role["role"],)

    logs = capfd.readouterr()
    log_text = logs.out + logs.err
    log_dir = Path(os.environ["AIRFLOW_HOME"]) / "logs"
    for path in log_dir.glob(f"**/*{name}*/**/*"):
        if path.is_file():
            log_text += path.read_text(errors="replace")
    assert f"connector {name} streaming metrics: " in log_text  # the task logs were captured
    assert password not in log_text

    with create_session() as session:
        values = [
            x.value
            for x in session.query(XComModel).filter(
                XComModel.run_id.in_([r.run_id for r in runs]), XComModel.dag_id.like(f"{name}__%")
            )
        ]
    assert len(values) >= 2 and any("metrics" in json.dumps(v, default=str) for v in values)
    assert all(password not in json.dumps(v, default=str) for v in values)

    records = read_topic(f"{name}.public.customers")
    assert len(records) == 250 + 5
    assert all(password.encode() not in (r.raw_key or b"") + (r.raw_value or b"") for r in records)


def test_connector_helpers_run_as_the_databases_role(database: str) -> None:
    """The other integration tests' connector (tests.support's setup and stream) runs as the test database's
    least-privilege role, not as the superuser: the role owns what setup creates and streams what it captured."""
    with psycopg.connect(as_connector(database)) as conn:
        flags = conn.execute(
            "SELECT current_user, rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    assert flags == (database_role(database), False, True)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    config = connector(unique("who"), **{"signal.data.collection": SIGNALS, "snapshot.mode": "no_data"})
    setup(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        owners = conn.execute(
            "SELECT relname, relowner::regrole::text FROM pg_class WHERE relname IN ('walflow_state', 'walflow_signal')"
        ).fetchall()
        conn.execute("INSERT INTO t VALUES (1)")
    assert dict(owners) == {"walflow_state": database_role(database), "walflow_signal": database_role(database)}
    assert stream(config, database).events == 1


def test_setup_names_the_missing_grant_as_a_managed_service_gives_it(database: str) -> None:
    """Where there is no superuser: a role without REPLICATION is refused with the grant to ask for (the attribute, or
    Amazon RDS's rds_replication membership, which walflow also recognises); a role without EXECUTE on
    pg_logical_emit_message is told its incremental snapshots' watermarks need it, or read.only."""
    from walflow.config.connector import parse_config
    from walflow.errors import SourceError
    from walflow.source.connection import check_server, connect, server_info

    role = unique("managed").lower()
    base = [p for p in database.split() if not p.startswith(("user=", "password="))]
    dsn = " ".join([*base, f"user={role}", f"password={PASSWORD}"])
    config = parse_config({"name": "m", "topic.prefix": "m"})
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rds_replication') THEN CREATE ROLE"
            " rds_replication NOLOGIN; END IF; END $$"
        )
    try:
        with connect(dsn) as conn:
            with pytest.raises(SourceError, match=rf"ALTER ROLE {role} REPLICATION.*GRANT rds_replication TO {role}"):
                check_server(conn, config, creating_slot=True)
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(f"GRANT rds_replication TO {role}")
        with connect(dsn) as conn:
            assert server_info(conn).has_replication
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(f"REVOKE rds_replication FROM {role}")
            conn.execute(f"ALTER ROLE {role} REPLICATION")
            conn.execute("CREATE TABLE managed_t (id int PRIMARY KEY)")
            conn.execute(f"GRANT SELECT ON managed_t TO {role}")
            conn.execute("CREATE PUBLICATION managed_pub FOR TABLE managed_t")
            for (overload,) in conn.execute(
                "SELECT oid::regprocedure::text FROM pg_proc WHERE proname = 'pg_logical_emit_message'"
            ).fetchall():
                conn.execute(
                    f"REVOKE EXECUTE ON FUNCTION {overload} FROM PUBLIC"
                )  # 3 arguments, and 4 from PostgreSQL 17
        config = connector(unique("managed"), **{"publication.name": "managed_pub",
                                                 "publication.autocreate.mode": "disabled",
                                                 "table.include.list": "public.managed_t"})  # fmt: skip
        from walflow.source.prepare import setup_source

        with connect(dsn) as conn:
            report = setup_source(conn, config)
        # the server's own overload: PostgreSQL 17 added a fourth argument (flush)
        grant = rf"GRANT EXECUTE ON FUNCTION pg_logical_emit_message\(boolean,text,text(,boolean)?\) TO {role} "
        assert any(re.search(grant, w) for w in report.warnings), report.warnings
    finally:
        with psycopg.connect(database, autocommit=True) as conn:
            for (slot,) in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()"
            ).fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute("DROP OWNED BY " + role)
            conn.execute("DROP ROLE " + role)
