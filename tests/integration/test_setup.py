"""The setup step against a real server: checks, publication modes, slot, idempotence."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.privileges import as_connector, database_role, hand_over
from tests.support import connector, prepare_source, setup, stream, unique
from walflow.capture.setup import ensure_signal_table
from walflow.errors import SlotError, SourceError
from walflow.source.connection import connect
from walflow.source.prepare import setup_source


def tables(dsn: str, *ddl: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in ddl:
            conn.execute(statement)


def published(dsn: str, publication: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s", (publication,)
        ).fetchall()
    return {r[0] for r in rows}


@pytest.mark.parametrize("mode", ["filtered", "all_tables"])
def test_setup_is_idempotent(database: str, mode: str) -> None:
    tables(database, "CREATE TABLE a (id int PRIMARY KEY)")
    config = connector(unique("setup"), **{"publication.autocreate.mode": mode})
    if mode == "filtered":  # the connector role, owning the captured table through its group (roles.sql)
        hand_over(database, "public.a")
        dsn = as_connector(database)
    else:  # superuser: PostgreSQL lets only a superuser create a publication FOR ALL TABLES
        dsn = database
    with connect(dsn) as conn:
        first = setup_source(conn, config)
        second = setup_source(conn, config)
    assert first.publication_created and first.slot_created
    assert not second.publication_created and not second.slot_created and not second.publication_altered
    assert second.slot_confirmed_lsn == first.slot_confirmed_lsn
    assert first.captured_tables == ["public.a"]


def test_filtered_publication_follows_include_list(database: str) -> None:
    tables(
        database,
        "CREATE TABLE a (id int PRIMARY KEY)",
        "CREATE TABLE b (id int PRIMARY KEY)",
        'CREATE TABLE "Odd.Name" (id int PRIMARY KEY)',
    )
    hand_over(database, "a", '"Odd.Name"')  # the captured tables (b is not) go to the connector role's group
    config = connector(
        unique("filt"), **{"publication.autocreate.mode": "filtered", "table.include.list": r"public\.a"}
    )
    prepare_source(config, database)
    assert published(database, config.publication_name) == {"public.a"}
    wider = connector(
        config.name,
        **{
            "slot.name": config.slot_name,
            "publication.name": config.publication_name,
            "publication.autocreate.mode": "filtered",
            "table.include.list": r"public\.a,public\.Odd\.Name",
        },
    )
    report = prepare_source(wider, database)
    assert report.publication_altered
    assert published(database, config.publication_name) == {"public.a", "public.Odd.Name"}


@pytest.mark.parametrize("mode", ["filtered", "all_tables"])
def test_a_partitioned_table_is_captured_with_its_partitions(database: str, mode: str) -> None:
    """As Debezium does (tests/compat's 'partitioned' scenario): the snapshot reads the partitioned table and each
    partition into their own topics, and changes stream under the partition's name; a 'filtered' publication holds
    them all, and later batches find nothing missing from it (its catalog view lists partitions, not the parent)."""
    from tests.support import read_topic

    tables(
        database,
        "CREATE TABLE pm (id int, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)",
        "CREATE TABLE pm_2024 PARTITION OF pm FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')",
        "CREATE TABLE pm_2025 PARTITION OF pm FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')",
        "INSERT INTO pm VALUES (1, '2024-05-01'), (2, '2025-02-01')",
    )
    if mode == "filtered":
        hand_over(database, "pm", "pm_2024", "pm_2025")
    config = connector(unique("part"), **{"publication.autocreate.mode": mode, "table.include.list": r"public\.pm.*"})
    setup(config, database)
    tables(database, "INSERT INTO pm VALUES (3, '2024-06-01')")
    for _ in range(2):
        summary = stream(config, database)
        assert not summary.warnings, summary.warnings
    ops = {
        t: [(r.op, r.key_payload["id"]) for r in read_topic(f"{config.topic_prefix}.public.{t}")]
        for t in ("pm", "pm_2024", "pm_2025")
    }
    assert ops == {"pm": [("r", 1), ("r", 2)], "pm_2024": [("r", 1), ("c", 3)], "pm_2025": [("r", 2)]}


def test_disabled_mode_needs_existing_publication(database: str) -> None:
    config = connector(unique("dis"), **{"publication.autocreate.mode": "disabled"})
    with (
        connect(as_connector(database)) as conn,
        pytest.raises(SourceError, match=r"does not exist and 'publication\.autocreate\.mode' is 'disabled'"),
    ):
        setup_source(conn, config)
    with psycopg.connect(database) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
        ).fetchone() == (0,)


def test_table_without_primary_key_is_warned_about(database: str) -> None:
    tables(database, "CREATE TABLE events (msg text)")
    report = prepare_source(connector(unique("nopk")), database)
    assert any("events has no primary key" in w for w in report.warnings)


def test_slot_active_elsewhere_is_an_error(database: str) -> None:
    """A slot that another consumer (here pg_recvlogical) streams from is never taken over."""
    config = connector(unique("busy"))
    prepare_source(config, database)
    params = dict(p.split("=", 1) for p in database.split())
    recv = subprocess.Popen(  # the other consumer connects as the superuser
        [
            str(Path(os.environ["WALFLOW_PG_BINDIR"]) / "pg_recvlogical"),
            "-h",
            params["host"],
            "-p",
            params["port"],
            "-U",
            params["user"],
            "-d",
            params["dbname"],
            "--slot",
            config.slot_name,
            "--start",
            "-f",
            "/dev/null",
            "-o",
            "proto_version=1",
            "-o",
            f"publication_names={config.publication_name}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PGPASSWORD": params.get("password", "")},
    )
    try:
        with psycopg.connect(database) as conn:
            for _ in range(100):
                row = conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
                ).fetchone()
                if row and row[0]:
                    break
                time.sleep(0.1)
            else:
                pytest.fail("pg_recvlogical did not take the slot")
        with pytest.raises(SlotError, match="in use by another process"):
            prepare_source(config, database)
        with pytest.raises(SlotError, match="in use by another process"):
            stream(config, database)
    finally:
        recv.terminate()
        recv.wait(10)


# -- a slot that existed before and is gone ----------------------------------------------------------------------
def drop_slot(dsn: str, slot: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def slot_exists(dsn: str, slot: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone() == (
            1,
        )


@pytest.mark.parametrize("mode", ["never", "no_data"])
def test_lost_slot_is_not_recreated_without_a_snapshot(database: str, mode: str) -> None:
    """never/no_data store a 'skipped' snapshot state: a later setup must not quietly create a new slot."""
    tables(database, "CREATE TABLE t (id int PRIMARY KEY)")
    config = connector(unique("lostnd"), **{"snapshot.mode": mode})
    setup(config, database)
    drop_slot(database, config.slot_name)
    with pytest.raises(SlotError, match=f"snapshot.mode='{mode}' would not re-read the data"):
        setup(config, database)
    assert not slot_exists(database, config.slot_name)
    # switching to 'when_needed' re-reads the table into a new slot, and says so in the log
    again = connector(
        config.name,
        **{"slot.name": config.slot_name, "publication.name": config.publication_name, "snapshot.mode": "when_needed"},
    )
    report = setup(again, database)
    assert report["slot_created"] and report["snapshot"]["ran"]


def test_initial_only_never_recreates_its_slot(database: str) -> None:
    """initial_only drops its slot after the snapshot; a second setup must not leave a slot retaining WAL."""
    tables(database, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1)")
    config = connector(unique("only"), **{"snapshot.mode": "initial_only"})
    assert setup(config, database)["snapshot"]["ran"]
    second = setup(config, database)
    assert not second["snapshot"]["ran"] and not second["slot_created"]
    assert not slot_exists(database, config.slot_name)


# -- privileges and replica identity, checked before any DDL ------------------------------------------------------
@pytest.fixture()
def plain_role(database: str) -> Iterator[str]:
    """A LOGIN REPLICATION role with no privilege on anything; yields its DSN."""
    from tests.privileges import PASSWORD

    role = unique("plain").lower()
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN REPLICATION PASSWORD {}").format(sql.Identifier(role), sql.Literal(PASSWORD))
        )
    try:
        yield " ".join(
            [
                *(p for p in database.split() if not p.startswith(("user=", "password="))),
                f"user={role}",
                f"password={PASSWORD}",
            ]
        )
    finally:
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_missing_privileges_fail_before_any_ddl(database: str, plain_role: str) -> None:
    # a role of its own, with no privileges at first: the database's connector role has them already
    tables(
        database,
        "CREATE TABLE a (id int PRIMARY KEY)",
        'CREATE TABLE "b ""x""" (id int PRIMARY KEY)',
        "CREATE SCHEMA sales",
        "CREATE TABLE sales.o (id int PRIMARY KEY)",
    )
    role = dict(p.split("=", 1) for p in plain_role.split())["user"]
    config = connector(unique("priv"), **{"publication.autocreate.mode": "filtered"})
    # SELECT does not reach a table whose schema the role may not use
    with (
        connect(plain_role) as conn,
        pytest.raises(
            SourceError,
            match=r"lacks USAGE on schema\(s\) \"sales\" of captured tables.*GRANT USAGE ON SCHEMA \"sales\"",
        ),
    ):
        setup_source(conn, config)
    tables(database, f'GRANT USAGE ON SCHEMA sales TO "{role}"')
    with (
        connect(plain_role) as conn,
        pytest.raises(SourceError, match=r'lacks SELECT on captured table\(s\) public.a, public.b "x", sales.o'),
    ):
        setup_source(conn, config)
    tables(database, f'GRANT SELECT ON a, "b ""x""", sales.o TO "{role}"')
    with connect(plain_role) as conn, pytest.raises(SourceError, match="lacks CREATE on database"):
        setup_source(conn, config)
    tables(database, f'GRANT CREATE ON DATABASE "{database.split("dbname=")[1].split()[0]}" TO "{role}"')
    with connect(plain_role) as conn, pytest.raises(SourceError, match=r"does not own table\(s\) public.a"):
        setup_source(conn, config)
    everything = connector(unique("privall"))  # all_tables
    with (
        connect(plain_role) as conn,
        pytest.raises(SourceError, match="FOR ALL TABLES: PostgreSQL allows that to superusers only"),
    ):
        setup_source(conn, everything)
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
        ).fetchone() == (0,)


def test_primary_key_with_replica_identity_nothing_is_warned_about(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    tables(
        database,
        "CREATE TABLE keyed (id int PRIMARY KEY)",
        "ALTER TABLE keyed REPLICA IDENTITY NOTHING",
        "CREATE TABLE fine (id int PRIMARY KEY)",
    )
    with caplog.at_level("WARNING"):
        report = prepare_source(connector(unique("nothing")), database)
    warned = [w for w in report.warnings if "keyed" in w]
    assert (
        len(warned) == 1
        and "primary key but REPLICA IDENTITY NOTHING" in warned[0]
        and "REPLICA IDENTITY DEFAULT" in warned[0]
    )
    assert not any("fine" in w for w in report.warnings)
    assert any("keyed" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_signal_table_with_awkward_name_is_created_once(database: str) -> None:
    """The signal table's existence check quotes its name: a quote inside it must neither break nor recreate it."""
    # CREATE on the signal table's schema, as roles.sql grants it on public
    tables(
        database,
        'CREATE SCHEMA "Sig ""nals"""',
        f'GRANT CREATE ON SCHEMA "Sig ""nals""" TO "{database_role(database)}"',
    )
    config = connector(unique("sig"), **{"signal.data.collection": '"Sig ""nals"""."walflow ""signal"""'})
    with connect(as_connector(database)) as conn:
        assert ensure_signal_table(conn, config)
        assert not ensure_signal_table(conn, config)
    with psycopg.connect(database) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND"
            " c.relname = %s",
            ('Sig "nals"', 'walflow "signal"'),
        ).fetchone()
    assert found == (1,)


# -- connection settings from the connector reach every connection -------------------------------------------------
@pytest.fixture()
def airflow_setup(
    tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    from tests.support import airflow_connector

    name = unique("tls")
    tables(database, "CREATE TABLE t (id int PRIMARY KEY)")
    # the Airflow Connection logs in as the connector role (airflow_connector)
    for key, value in airflow_connector(tmp_path, name, database, kafka_bootstrap, "snapshot.mode: no_data").items():
        monkeypatch.setenv(key, value)
    return {"name": name, "dsn": database}


def test_sslmode_reaches_the_connection(airflow_setup: dict[str, str]) -> None:
    """The embedded server has no TLS: 'require' must fail to connect (so it was applied), 'disable' works."""
    from walflow.airflow.operators import WalflowSetupOperator
    from walflow.airflow.status import status

    name = airflow_setup["name"]
    with pytest.raises(SourceError, match=r"cannot connect to the source database: .*SSL"):
        WalflowSetupOperator(task_id="setup", connector=name, overrides={"database.sslmode": "require"}).execute({})
    report = WalflowSetupOperator(task_id="setup", connector=name, overrides={"database.sslmode": "disable"}).execute(
        {}
    )
    assert report["slot_created"]
    # `walflow status` connects with the connector's TLS settings too
    assert status(name)["source"]["exists"]
    folder = Path(os.environ["WALFLOW_CONNECTORS_DIR"])
    yaml_file = folder / f"{name}.yaml"
    yaml_file.write_text(yaml_file.read_text() + "\ndatabase.sslmode: require\n")
    # a source walflow cannot reach is part of the status, which goes on (the UI page and the monitor DAG show it)
    refused = status(name)
    assert refused["source"]["reachable"] is False and "SSL" in refused["source"]["error"], refused
    assert refused["state"] == "failing" and "the source database cannot be reached" in refused["problems"][0]["reason"]


def test_initial_statements_run_on_each_connection(airflow_setup: dict[str, str]) -> None:
    name, dsn = airflow_setup["name"], airflow_setup["dsn"]
    tables(dsn, "CREATE TABLE init_log (app text)", "GRANT INSERT ON init_log TO PUBLIC")
    from walflow.airflow.operators import WalflowSetupOperator
    from walflow.airflow.status import status

    statements = (
        "SET application_name = 'walflow;;init'; INSERT INTO init_log VALUES (current_setting('application_name'))"
    )
    WalflowSetupOperator(
        task_id="setup", connector=name, overrides={"database.initial.statements": statements}
    ).execute({})
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT app FROM init_log").fetchall() == [("walflow;init",)]  # ';;' is a literal ';'
    folder = Path(os.environ["WALFLOW_CONNECTORS_DIR"])
    yaml_file = folder / f"{name}.yaml"
    yaml_file.write_text(yaml_file.read_text() + "\ndatabase.initial.statements: SELECT no_such_function()\n")
    failed = status(name)["source"]
    assert failed["reachable"] is False
    assert "'database.initial.statements' statement 'SELECT no_such_function()' failed" in failed["error"], failed


def test_state_written_by_a_newer_walflow_is_refused_before_anything_changes(database: str) -> None:
    """Setup and every stream batch record the state format and the walflow that wrote it; state of a newer format
    (a component left on an older walflow after an upgrade) stops both before they read or change anything."""
    from walflow.errors import StateFormatError
    from walflow.source.state import FORMAT_KEY, STATE_FORMAT, StateStore

    tables(database, "CREATE TABLE a (id int PRIMARY KEY)")
    config = connector(unique("fmt"), **{"publication.autocreate.mode": "all_tables"})
    setup(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        store = StateStore(conn, config.name, config.state_table)
        assert store.get(FORMAT_KEY)["format"] == STATE_FORMAT
        store.put(FORMAT_KEY, {"format": STATE_FORMAT + 1, "walflow": "99.0"})
        (before,) = conn.execute(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
        ).fetchone()
        conn.execute("INSERT INTO a VALUES (1)")
    for step in (lambda: stream(config, database), lambda: setup(config, database)):
        with pytest.raises(
            StateFormatError, match=r"written by walflow 99\.0 \(state format 2\).*install the same walflow"
        ):
            step()
    with psycopg.connect(database) as conn:
        (after,) = conn.execute(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
        ).fetchone()
        assert (
            after == before and StateStore(conn, config.name, config.state_table).get(FORMAT_KEY)["walflow"] == "99.0"
        )


def test_replica_identity_autoset_values_set_the_tables_identities(database: str) -> None:
    """replica.identity.autoset.values, as Debezium applies it when it starts: setup gives each captured table whose
    name matches (Java patterns, case-insensitive) the identity named, FULL or an index; other tables keep theirs,
    and a second setup changes nothing."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE ri_full (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE ri_idx (id int NOT NULL, v text)")
        conn.execute("CREATE UNIQUE INDEX ri_idx_id ON ri_idx (id)")
        conn.execute("CREATE TABLE ri_other (id int PRIMARY KEY)")
    hand_over(database, "public.ri_full", "public.ri_idx", "public.ri_other")
    identities = r"public\.ri_full:FULL, PUBLIC\.RI_IDX:INDEX ri_idx_id"
    config = connector(unique("ri"), **{"snapshot.mode": "no_data", "replica.identity.autoset.values": identities})

    def current() -> dict[str, str]:
        with psycopg.connect(database) as conn:
            rows = conn.execute(
                "SELECT relname, relreplident::text FROM pg_class WHERE relname LIKE 'ri\\_%%' AND relkind = 'r'"
            ).fetchall()
        return dict(rows)

    assert current() == {"ri_full": "d", "ri_idx": "d", "ri_other": "d"}
    setup(config, database)
    assert current() == {"ri_full": "f", "ri_idx": "i", "ri_other": "d"}
    with psycopg.connect(database) as conn:
        (index,) = conn.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indisreplident"
        ).fetchone()
    assert index == "ri_idx_id"
    setup(config, database)
    assert current() == {"ri_full": "f", "ri_idx": "i", "ri_other": "d"}
    # an index that does not exist: the setup stops, naming the table, the identity and what PostgreSQL said
    wrong = connector(
        unique("ri"), **{"snapshot.mode": "no_data", "replica.identity.autoset.values": r"public\.ri_other:INDEX nope"}
    )
    with pytest.raises(SourceError, match=r"public\.ri_other the replica identity INDEX nope, and PostgreSQL refused"):
        setup(wrong, database)
