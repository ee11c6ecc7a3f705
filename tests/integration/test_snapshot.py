"""Initial snapshots against the real server and broker: modes, consistency with the stream, parallel readers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.integration.test_types import CASES, NO_DEFAULT, PREAMBLE, supported
from tests.support import connector, read_topic, replay, setup, stream, unique
from walflow.capture.setup import SnapshotError
from walflow.errors import SlotError
from walflow.kafka import ENCODE_RUN

ROOT = Path(__file__).resolve().parents[2]


def run_sql(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def rows(dsn: str, table: str) -> dict[int, Any]:
    with psycopg.connect(dsn) as conn:
        return {r[0]: r[1] for r in conn.execute(f"SELECT id, v FROM {table}").fetchall()}


def state_of(records) -> dict[int, Any]:
    return {v["id"]: v["v"] for v in replay(records).values()}


def test_initial_snapshot_then_stream_has_no_gap_and_no_overlap(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE a (id int PRIMARY KEY, v text)",
        "CREATE TABLE b (id int PRIMARY KEY, v text)",
        "CREATE TABLE c (id int PRIMARY KEY, v text)",
        "INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 2500) g",
        "INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 1200) g",
        "INSERT INTO c SELECT g, 'c' || g FROM generate_series(1, 10) g",
    )
    config = connector(unique("snap"), **{"snapshot.max.threads": 3, "snapshot.fetch.size": 500})
    report = setup(config, database)
    assert report["snapshot"]["ran"] and report["snapshot"]["exported_snapshot"]
    assert report["snapshot"]["rows_per_table"] == {"public.a": 2500, "public.b": 1200, "public.c": 10}
    run_sql(
        database,
        "UPDATE a SET v = 'changed' WHERE id <= 10",
        "DELETE FROM b WHERE id > 1100",
        "INSERT INTO c VALUES (11, 'c11')",
    )
    summary = stream(config, database)
    assert summary.events == 10 + 100 + 1
    for table in ("a", "b", "c"):
        records = read_topic(f"{config.topic_prefix}.public.{table}")
        snapshot_rows = [r for r in records if r.op == "r"]
        assert len(snapshot_rows) == len({r.key_payload["id"] for r in snapshot_rows}), "a row was snapshotted twice"
        first_stream = next((i for i, r in enumerate(records) if r.op != "r"), len(records))
        assert all(r.op == "r" for r in records[:first_stream]) and all(r.op != "r" for r in records[first_stream:])
        assert state_of(records) == rows(database, table)
    markers = [
        r.payload["source"]["snapshot"]
        for t in "abc"
        for r in read_topic(f"{config.topic_prefix}.public.{t}")
        if r.op == "r"
    ]
    assert markers.count("first") == 1 and markers.count("last") == 1
    assert markers.count("first_in_data_collection") == 2 and markers.count("last_in_data_collection") == 2
    # a second setup run changes nothing
    again = setup(config, database)
    assert again["snapshot"] == {"ran": False, "reason": "snapshot.mode=initial"} and not again["slot_created"]


def test_one_reader_sends_every_row_once_in_order_across_encode_runs(database: str) -> None:
    """The reader encodes runs of ENCODE_RUN rows, then queues them, holding each table's last row for its marker:
    tables ending just past a run, exactly at one, and of one row keep every row once, in key order, marked."""
    sizes = {"p": 2 * ENCODE_RUN + 1, "q": ENCODE_RUN, "r": 1}
    run_sql(database, *(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)" for t in sizes))
    run_sql(
        database, *(f"INSERT INTO {t} SELECT g, '{t}' || g FROM generate_series(1, {n}) g" for t, n in sizes.items())
    )
    config = connector(
        unique("runs"), **{"snapshot.fetch.size": ENCODE_RUN // 2 + 3, "table.include.list": "public\\.[pqr]"}
    )
    assert setup(config, database)["snapshot"]["rows_per_table"] == {f"public.{t}": n for t, n in sizes.items()}
    markers = []
    for table, count in sizes.items():
        records = read_topic(f"{config.topic_prefix}.public.{table}")
        assert [r.key_payload["id"] for r in records] == list(range(1, count + 1))
        assert [r.payload["after"]["v"] for r in records] == [f"{table}{i}" for i in range(1, count + 1)]
        markers.append([r.payload["source"]["snapshot"] for r in records])
    inner = ["true"] * (ENCODE_RUN - 2)
    assert markers == [
        ["first", *inner, *["true"] * (ENCODE_RUN + 1), "last_in_data_collection"],
        ["first_in_data_collection", *inner, "last_in_data_collection"],
        ["last"],
    ]


def test_snapshot_under_concurrent_writes_is_consistent(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 20000) g",
    )
    config = connector(unique("busy"), **{"snapshot.fetch.size": 1000, "snapshot.max.threads": 2})
    stop = threading.Event()

    def writer() -> None:
        i = 0
        with psycopg.connect(database, autocommit=True) as conn:
            while not stop.is_set():
                i += 1
                conn.execute("UPDATE t SET v = %s WHERE id = %s", (f"w{i}", (i * 7919) % 20000 + 1))
                if i % 5 == 0:
                    conn.execute("DELETE FROM t WHERE id = %s", ((i * 104729) % 20000 + 1,))
                    conn.execute("INSERT INTO t VALUES (%s, %s) ON CONFLICT DO NOTHING", (20000 + i, f"n{i}"))

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.3)
        setup(config, database)
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
    while stream(config, database).events:
        pass
    assert state_of(read_topic(f"{config.topic_prefix}.public.t")) == rows(database, "t")


@pytest.mark.parametrize("mode", ["never", "no_data"])
def test_no_snapshot_modes(database: str, mode: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'old')")
    config = connector(unique("nosnap"), **{"snapshot.mode": mode})
    assert setup(config, database)["snapshot"]["ran"] is False
    run_sql(database, "INSERT INTO t VALUES (2, 'new')")
    stream(config, database)
    assert [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t")] == [2]


def test_always_mode_snapshots_every_run_with_existing_slot(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')")
    config = connector(unique("always"), **{"snapshot.mode": "always"})
    first = setup(config, database)
    run_sql(database, "UPDATE t SET v = 'b' WHERE id = 1")
    second = setup(config, database)
    assert first["snapshot"]["ran"] and first["snapshot"]["exported_snapshot"]
    assert second["snapshot"]["ran"] and not second["snapshot"]["exported_snapshot"]  # slot exists: isolation approach
    stream(config, database)
    records = read_topic(f"{config.topic_prefix}.public.t")
    assert [r.op for r in records] == ["r", "r", "u"]  # the update is streamed again after the second snapshot
    assert state_of(records) == {1: "b"}


def test_a_failed_snapshot_beside_a_streamed_slot_keeps_the_slot(database: str) -> None:
    """snapshot.mode=always on a connector that has streamed: if that snapshot fails, the next setup run takes it
    again beside the same slot, which still holds the changes not yet streamed (a delete here); replacing the slot,
    as after an interrupted first snapshot, would lose them."""

    class Interrupted(Exception):
        pass

    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 50) g",
    )
    config = connector(unique("keep"), **{"snapshot.mode": "always", "snapshot.fetch.size": 10})
    setup(config, database)
    stream(config, database)
    run_sql(database, "DELETE FROM t WHERE id = 7")
    seen = [0]

    def fail_midway(stage: str) -> None:
        seen[0] += 1
        if stage == "snapshot_row" and seen[0] == 20:
            raise Interrupted("the snapshot stopped")

    with pytest.raises(Interrupted):
        setup(config, database, fault_hook=fail_midway)
    with pytest.raises(SlotError, match="has not completed"):
        stream(config, database)
    assert setup(config, database)["snapshot"]["ran"]
    stream(config, database)
    records = read_topic(f"{config.topic_prefix}.public.t")
    assert [r.key_payload["id"] for r in records if r.op == "d"] == [7], (
        "the delete streamed before the failed snapshot was lost"
    )
    assert state_of(records) == rows(database, "t")


def test_initial_only_snapshots_and_never_streams(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')")
    config = connector(unique("only"), **{"snapshot.mode": "initial_only"})
    assert setup(config, database)["snapshot"]["ran"]
    with psycopg.connect(database) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
        ).fetchone() == (0,)
    assert stream(config, database).stopped_by == "snapshot.mode=initial_only"
    assert [r.op for r in read_topic(f"{config.topic_prefix}.public.t")] == ["r"]


def test_when_needed_recreates_a_lost_slot_and_snapshots(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')")
    config = connector(unique("needed"), **{"snapshot.mode": "when_needed"})
    assert setup(config, database)["snapshot"]["ran"]
    assert not setup(config, database)["snapshot"]["ran"]
    run_sql(database, f"SELECT pg_drop_replication_slot('{config.slot_name}')", "INSERT INTO t VALUES (2, 'b')")
    with pytest.raises(SlotError, match="does not exist"):
        stream(config, database)
    report = setup(config, database)
    assert report["snapshot"]["ran"] and report["slot_created"]
    assert state_of(read_topic(f"{config.topic_prefix}.public.t")) == {1: "a", 2: "b"}


def test_initial_mode_refuses_to_recreate_a_lost_slot(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = connector(unique("lost"))
    setup(config, database)
    run_sql(database, f"SELECT pg_drop_replication_slot('{config.slot_name}')")
    with pytest.raises(SlotError, match="never recreates a slot silently"):
        setup(config, database)


def test_include_collection_list_and_select_override(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE a (id int PRIMARY KEY, v text)",
        "CREATE TABLE b (id int PRIMARY KEY, v text)",
        "CREATE TABLE nokey (v text)",
        "INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 10) g",
        "INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 10) g",
        "INSERT INTO nokey SELECT 'n' || g FROM generate_series(1, 5) g",
    )
    config = connector(
        unique("over"),
        **{
            "snapshot.include.collection.list": r"public\.a,public\.nokey",
            "snapshot.select.statement.overrides": "public.a",
            # '%' is the server's, not a driver placeholder
            "snapshot.select.statement.overrides.public.a": "SELECT * FROM public.a WHERE id > 7 AND v LIKE 'a%'",
        },
    )
    report = setup(config, database)
    assert report["snapshot"]["rows_per_table"] == {"public.a": 3, "public.nokey": 5}
    assert sorted(r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.a")) == [8, 9, 10]
    assert read_topic(f"{config.topic_prefix}.public.b") == []
    assert all(r.key is None for r in read_topic(f"{config.topic_prefix}.public.nokey"))


def test_awkward_keys_and_names(database: str) -> None:
    run_sql(
        database,
        'CREATE SCHEMA "My.Schema"',
        'CREATE TABLE "My.Schema"."Odd ""Table""" ("Key" text, f float8, PRIMARY KEY ("Key", f))',
        "INSERT INTO \"My.Schema\".\"Odd \"\"Table\"\"\" VALUES ('b', 'NaN'), ('a', 'Infinity'), ('a', '-Infinity'),"
        " ('ä', 1), ('a', 0)",
    )
    config = connector(unique("odd"), **{"snapshot.fetch.size": 2})
    report = setup(config, database)
    assert report["snapshot"]["rows"] == 5
    records = read_topic(f"{config.topic_prefix}.My.Schema.Odd__Table_")
    assert sorted((r.key_payload["Key"], str(r.key_payload["f"])) for r in records) == sorted(
        [("b", "NaN"), ("a", "Infinity"), ("a", "-Infinity"), ("ä", "1.0"), ("a", "0.0")]
    )


# alone: its second setup creates a slot, which waits for every transaction running on the server to end and for
# the next record of them (written every 15 s), so other tests' writers made it take 90 s instead of 8
@pytest.mark.disruptive
def test_killed_snapshot_is_taken_again_from_the_start(database: str) -> None:
    total = 20_000
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        f"INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, {total}) g",
    )
    name = unique("kill")
    raw = {"name": name, "topic.prefix": name, "slot.name": name, "publication.name": name, "snapshot.fetch.size": 100}
    config = connector(name, **{k: v for k, v in raw.items() if k not in ("name",)})
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}"}
    child = subprocess.run(
        [sys.executable, "-m", "tests.integration.crash_child", json.dumps(raw), database, "snapshot_row", "12000"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    partial = len(read_topic(f"{name}.public.t"))
    assert partial < total
    with pytest.raises(SlotError, match="has not completed"):
        stream(config, database)
    report = setup(config, database)
    assert report["snapshot"]["ran"] and report["snapshot"]["rows"] == total
    run_sql(database, "UPDATE t SET v = 'x' WHERE id = 1")
    stream(config, database)
    assert state_of(read_topic(f"{name}.public.t")) == rows(database, "t")


@pytest.mark.long
@pytest.mark.disruptive
def test_killed_snapshot_reader_process_fails_the_snapshot_and_it_is_taken_again(database: str) -> None:
    """snapshot.max.threads=2: a SIGKILL of one reader process fails the setup with a retryable error naming the
    reader; streaming is refused; the next setup takes the whole snapshot again and nothing is lost."""
    import psutil

    total = 40_000
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        f"INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, {total}) g",
        "ANALYZE t",
    )
    name = unique("killreader")
    config = connector(
        name, **{"snapshot.max.threads": 2, "snapshot.fetch.size": 500, "walflow.snapshot.range.rows": 4_000}
    )
    failure: list[BaseException] = []

    def run_setup() -> None:
        try:
            setup(config, database)
        except BaseException as exc:
            failure.append(exc)

    def readers() -> list[Any]:
        found = []
        for child in psutil.Process().children(recursive=True):
            try:
                if "walflow.capture.snapshot_workers" in child.cmdline():
                    found.append(child)
            except psutil.Error:  # gone, or a zombie of another test's child
                continue
        return found

    runner = threading.Thread(target=run_setup)
    runner.start()
    killed = None
    deadline = time.monotonic() + 120
    watcher = psycopg.connect(database, autocommit=True)
    while killed is None and runner.is_alive() and time.monotonic() < deadline:
        # a reader is at work once its connection reads the table
        (reading,) = watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s"
            ' AND query LIKE \'%%FROM "public"."t"%%\'',
            (f"walflow:{name}:snapshot-%",),
        ).fetchone()
        if reading:
            for child in readers():
                try:
                    child.send_signal(signal.SIGKILL)
                    killed = child.pid
                    break
                except psutil.Error:
                    continue
        time.sleep(0.02)
    watcher.close()
    runner.join(timeout=300)
    assert killed is not None, "no reader process was seen at work"
    assert failure and isinstance(failure[0], SnapshotError), failure
    assert f"pid {killed}" in str(failure[0]) and "killed by signal 9" in str(failure[0])
    assert getattr(failure[0], "retryable", False)
    assert not readers(), "reader processes outlived the failed snapshot"
    with pytest.raises(SlotError, match="has not completed"):
        stream(config, database)
    report = setup(config, database)
    assert report["snapshot"]["ran"] and report["snapshot"]["rows"] == total
    run_sql(database, "UPDATE t SET v = 'x' WHERE id = 1", "DELETE FROM t WHERE id = 2")
    stream(config, database)
    assert state_of(read_topic(f"{name}.public.t")) == rows(database, "t")


def test_golden_types_snapshot_path(database: str) -> None:
    """The snapshot reads values in the same text form as pgoutput: a row looks the same either way."""
    cases = supported([c for c in CASES if not c.mode])
    run_sql(database, *PREAMBLE, *{f"CREATE EXTENSION IF NOT EXISTS {c.needs}" for c in cases if c.needs})
    columns = ", ".join(f'"{c.id}" {c.ddl}' for c in cases)
    run_sql(
        database,
        f"CREATE TABLE golden (pk int PRIMARY KEY, {columns})",
        f"INSERT INTO golden VALUES (1, {', '.join(c.literal for c in cases)})",
    )
    config = connector(unique("snaptypes"))
    setup(config, database)
    run_sql(database, f"INSERT INTO golden VALUES (2, {', '.join(c.literal for c in cases)})")
    stream(config, database)
    snap, streamed = read_topic(f"{config.topic_prefix}.public.golden")
    assert (snap.op, streamed.op) == ("r", "c")
    snap_fields = {f["field"]: f for f in snap.value["schema"]["fields"][1]["fields"]}
    failures = []
    for case in cases:
        if snap_fields.get(case.id) != {**case.schema, "optional": True, "field": case.id}:
            failures.append(f"{case.id}: schema {snap_fields.get(case.id)}")
        expected = case.value if case.snapshot_value is NO_DEFAULT else case.snapshot_value
        if snap.payload["after"].get(case.id, "<missing>") != expected:
            failures.append(f"{case.id}: value {snap.payload['after'].get(case.id, '<missing>')!r} != {expected!r}")
    assert not failures, "\n".join(failures)
    # the same values either way, but for the dates Debezium's snapshots read through java.sql.Date
    jdbc_dates = {c.id for c in CASES if c.snapshot_value is not NO_DEFAULT}
    assert jdbc_dates

    def others(after: dict) -> dict:
        return {k: v for k, v in after.items() if k != "pk" and k not in jdbc_dates}

    assert others(snap.payload["after"]) == others(streamed.payload["after"])
    assert snap.value["schema"] == streamed.value["schema"]


def test_lock_timeout_fails_the_snapshot_with_a_clear_message(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')")
    # the second setup run of snapshot.mode=always reads under its own snapshot (the slot exists): creating a
    # slot would instead wait for the locking transaction to end
    config = connector(
        unique("lock"),
        **{"snapshot.mode": "always", "snapshot.lock.timeout.ms": 800, "snapshot.locking.mode": "shared"},
    )
    setup(config, database)
    with psycopg.connect(database) as locker:
        locker.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(
            SnapshotError,
            match=r"could not lock table public\.t within snapshot\.lock\.timeout\.ms=800"
            r".*raise 'snapshot\.lock\.timeout\.ms'",
        ):
            setup(config, database)
        waited = time.monotonic() - started
    assert 0.8 <= waited < 30
    with pytest.raises(SlotError, match="has not completed"):
        stream(config, database)  # the failed snapshot is not taken for a complete one
    run_sql(database, "INSERT INTO t VALUES (2, 'b')")
    report = setup(config, database)  # the lock is gone: the next run snapshots again
    assert report["snapshot"]["ran"] and report["snapshot"]["rows"] == 2


def test_snapshot_delay_waits_after_the_slot_and_before_reading(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')")
    config = connector(unique("delay"), **{"snapshot.delay.ms": 1200})
    seen: list[tuple[float, str]] = []

    def progress(message: str) -> None:
        seen.append((time.monotonic(), message))
        if message.startswith("snapshot.delay.ms"):
            run_sql(database, "INSERT INTO t VALUES (2, 'during the delay')")

    setup(config, database, progress=progress)
    delay_at = next(t for t, m in seen if m.startswith("snapshot.delay.ms"))
    read_at = next(t for t, m in seen if m.startswith("snapshot of "))
    assert read_at - delay_at >= 1.2
    # the slot and its exported snapshot came before the delay: the row inserted during it is streamed, not read
    assert [(r.op, r.key_payload["id"]) for r in read_topic(f"{config.topic_prefix}.public.t")] == [("r", 1)]
    stream(config, database)
    assert [(r.op, r.key_payload["id"]) for r in read_topic(f"{config.topic_prefix}.public.t")] == [("r", 1), ("c", 2)]
