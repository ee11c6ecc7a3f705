"""The setup step against a real server: checks, publication modes, slot, idempotence."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from tests.support import connector, stream, unique
from walflow.errors import SlotError, SourceError
from walflow.source import connect, setup_source


def tables(dsn: str, *ddl: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in ddl:
            conn.execute(statement)


def published(dsn: str, publication: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s", (publication,)).fetchall()
    return {r[0] for r in rows}


def test_setup_is_idempotent(database: str) -> None:
    tables(database, "CREATE TABLE a (id int PRIMARY KEY)")
    config = connector(unique("setup"))
    with connect(database) as conn:
        first = setup_source(conn, config)
        second = setup_source(conn, config)
    assert first.publication_created and first.slot_created
    assert not second.publication_created and not second.slot_created and not second.publication_altered
    assert second.slot_confirmed_lsn == first.slot_confirmed_lsn
    assert first.captured_tables == ["public.a"]


def test_filtered_publication_follows_include_list(database: str) -> None:
    tables(database, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)", 'CREATE TABLE "Odd.Name" (id int PRIMARY KEY)')
    config = connector(unique("filt"), **{"publication.autocreate.mode": "filtered", "table.include.list": r"public\.a"})
    with connect(database) as conn:
        setup_source(conn, config)
    assert published(database, config.publication_name) == {"public.a"}
    wider = connector(config.name, **{"slot.name": config.slot_name, "publication.name": config.publication_name,
                                      "publication.autocreate.mode": "filtered", "table.include.list": r"public\.a,public\.Odd\.Name"})
    with connect(database) as conn:
        report = setup_source(conn, wider)
    assert report.publication_altered
    assert published(database, config.publication_name) == {"public.a", "public.Odd.Name"}


def test_disabled_mode_needs_existing_publication(database: str) -> None:
    config = connector(unique("dis"), **{"publication.autocreate.mode": "disabled"})
    with connect(database) as conn, pytest.raises(SourceError, match="does not exist and 'publication.autocreate.mode' is 'disabled'"):
        setup_source(conn, config)
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)).fetchone() == (0,)


def test_table_without_primary_key_is_warned_about(database: str) -> None:
    tables(database, "CREATE TABLE events (msg text)")
    with connect(database) as conn:
        report = setup_source(conn, connector(unique("nopk")))
    assert any("events has no primary key" in w for w in report.warnings)


def test_slot_active_elsewhere_is_an_error(database: str) -> None:
    """A slot that another consumer (here pg_recvlogical) streams from is never taken over."""
    config = connector(unique("busy"))
    with connect(database) as conn:
        setup_source(conn, config)
    params = dict(p.split("=", 1) for p in database.split())
    recv = subprocess.Popen(
        [
            str(Path(os.environ["WALFLOW_PG_BINDIR"]) / "pg_recvlogical"),
            "-h", params["host"], "-p", params["port"], "-U", params["user"], "-d", params["dbname"],
            "--slot", config.slot_name, "--start", "-f", "/dev/null",
            "-o", "proto_version=1", "-o", f"publication_names={config.publication_name}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        with psycopg.connect(database) as conn:
            for _ in range(100):
                row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)).fetchone()
                if row and row[0]:
                    break
                time.sleep(0.1)
            else:
                pytest.fail("pg_recvlogical did not take the slot")
        with connect(database) as conn, pytest.raises(SlotError, match="in use by another process"):
            setup_source(conn, config)
        with pytest.raises(SlotError, match="in use by another process"):
            stream(config, database)
    finally:
        recv.terminate()
        recv.wait(10)
