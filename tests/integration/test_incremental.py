"""Incremental snapshots and signals, executed by the stream task, against the real server and broker."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.privileges import hand_over
from tests.support import connector, read_topic, replay, setup, stream, unique
from walflow.capture.stream import rounds as stream_rounds

ROOT = Path(__file__).resolve().parents[2]
SIGNALS = "public.walflow_signal"


def run_sql(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def make(dsn: str, **overrides: Any):
    raw = {
        "signal.data.collection": SIGNALS,
        "snapshot.mode": "no_data",
        "incremental.snapshot.chunk.size": 100,
        **overrides,
    }
    config = connector(unique("inc"), **raw)
    setup(config, dsn)
    return config


def send_signal(
    dsn: str | psycopg.Connection, kind: str, data: dict[str, Any] | str | None = None, signal_id: str | None = None
) -> str:
    """Insert a signal row; ``dsn`` may be an open connection, to send several signals in one transaction."""
    signal_id = signal_id or uuid.uuid4().hex[:12]
    text = data if isinstance(data, str) or data is None else json.dumps(data)
    if isinstance(dsn, psycopg.Connection):
        dsn.execute(f"INSERT INTO {SIGNALS} VALUES (%s, %s, %s)", (signal_id, kind, text))
        return signal_id
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {SIGNALS} VALUES (%s, %s, %s)", (signal_id, kind, text))
    return signal_id


def signal_status(dsn: str, config, signal_id: str) -> dict[str, Any] | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT value FROM walflow_state WHERE connector = %s AND key = %s", (config.name, f"signal:{signal_id}")
        ).fetchone()
    return row[0] if row else None


def drain(config, dsn: str, limit: int = 200) -> int:
    events = 0
    for _ in range(limit):
        summary = stream(config, dsn)
        events += summary.events + summary.snapshot_rows
        if summary.events == 0 and summary.snapshot_rows == 0:
            return events
    raise AssertionError("the stream never drained")


def table_state(dsn: str, table: str) -> dict[Any, Any]:
    with psycopg.connect(dsn) as conn:
        return {r[0]: r[1] for r in conn.execute(f"SELECT id, v FROM {table}").fetchall()}


def topic_state(config, table: str = "t") -> dict[Any, Any]:
    return {v["id"]: v["v"] for v in replay(read_topic(f"{config.topic_prefix}.public.{table}")).values()}


def test_incremental_snapshot_of_a_table(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 2500) g",
    )
    config = make(database)
    signal_id = send_signal(database, "execute-snapshot", {"data-collections": ["public.t"], "type": "incremental"})
    drain(config, database)
    records = read_topic(f"{config.topic_prefix}.public.t")
    assert len(records) == 2500 and {r.op for r in records} == {"r"}
    assert {r.payload["source"]["snapshot"] for r in records} == {"incremental"}
    assert topic_state(config) == table_state(database, "t")
    status = signal_status(database, config, signal_id)
    assert status["status"] == "completed" and status["rows"] == 2500 and status["chunks"] >= 25


def window_updater(dsn: str, key_columns: int = 1) -> tuple[Any, list[tuple[Any, ...]]]:
    """A chunk hook that commits an update of the chunk's first selected row between its SELECT and its high
    watermark: the streamed update then falls inside the window, deterministically, and must drop that row.
    The key columns are the table's first ones, named ``id`` (and ``b``)."""
    hooked: list[tuple[Any, ...]] = []

    def hook(table: str, rows: list[list[Any]]) -> None:
        if not rows:
            return
        key = tuple(rows[0][:key_columns])
        where = " AND ".join(f"{c} = %s" for c in ("id", "b")[:key_columns])
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"UPDATE {table} SET v = 'in-window' WHERE {where}", key)
        hooked.append(key)

    return hook, hooked


def test_incremental_snapshot_under_concurrent_writes(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 3000) g",
    )
    config = make(database)
    stop = threading.Event()
    errors: list[BaseException] = []
    hook, hooked = window_updater(database)

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with psycopg.connect(database, autocommit=True) as conn:
                while not stop.is_set():
                    action = rng.random()
                    key = rng.randint(1, 3500)
                    try:
                        if action < 0.5:
                            conn.execute("UPDATE t SET v = %s WHERE id = %s", (f"u{rng.random():.6f}", key))
                        elif action < 0.7:
                            conn.execute("DELETE FROM t WHERE id = %s", (key,))
                        elif action < 0.9:
                            conn.execute("INSERT INTO t VALUES (%s, %s) ON CONFLICT DO NOTHING", (key, f"i{seed}"))
                        else:
                            conn.execute("UPDATE t SET id = %s WHERE id = %s", (rng.randint(3501, 9000), key))
                    except psycopg.errors.UniqueViolation:
                        pass
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    dropped = 0
    try:
        send_signal(database, "execute-snapshot", {"data-collections": ["public.t"]})
        for _ in range(40):
            summary = stream(config, database, chunk_hook=hook)
            dropped += summary.snapshot_rows_dropped
            if summary.snapshot_rows == 0 and summary.signals == 0 and not _running(database, config):
                break
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors, errors
    drain(config, database)
    assert not _running(database, config)
    assert topic_state(config) == table_state(database, "t")
    # every chunk had a row updated inside its window (unless a writer deleted it first, which drops it too)
    assert len(hooked) >= 20 and dropped >= len(hooked)


def test_a_row_deleted_in_its_window_stays_deleted_when_its_key_is_not_in_the_value(database: str) -> None:
    """A key column that column.exclude.list leaves out of the value is still the row's identity: a delete streamed
    inside the chunk's window drops the chunk's row of that key, which must not follow the delete as an 'r' event."""
    run_sql(
        database,
        "CREATE TABLE kc (id int PRIMARY KEY, v text)",
        "INSERT INTO kc SELECT g, 'v' || g FROM generate_series(1, 300) g",
    )
    config = make(database, **{"column.exclude.list": "public.kc.id"})
    deleted: list[int] = []

    def delete_in_window(table: str, rows: list[Any]) -> None:
        if rows and not deleted:
            run_sql(database, "DELETE FROM kc WHERE id = 50")
            deleted.append(50)

    send_signal(database, "execute-snapshot", {"data-collections": ["public.kc"]})
    for _ in range(10):
        summary = stream(config, database, chunk_hook=delete_in_window)
        if summary.snapshot_rows == 0 and summary.signals == 0 and not _running(database, config):
            break
    assert deleted == [50]
    ops = [
        r.op
        for r in read_topic(f"{config.topic_prefix}.public.kc")
        if r.key_payload == {"id": 50} and r.value is not None
    ]
    assert ops == ["d"], f"key 50 after its delete in the window: {ops}"


def test_composite_primary_key(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE ck (id int, b text, v text, PRIMARY KEY (id, b))",
        "INSERT INTO ck SELECT g / 3, 'k' || (g % 3), 'v' || g FROM generate_series(1, 450) g",
    )
    config = make(database)
    hook, hooked = window_updater(database, key_columns=2)
    send_signal(database, "execute-snapshot", {"data-collections": ["public.ck"]})
    run_sql(
        database, "UPDATE ck SET b = 'moved' WHERE id = 7 AND b = 'k1'"
    )  # a key change before the snapshot reads it
    summaries = []
    for _ in range(20):
        summaries.append(stream(config, database, chunk_hook=hook))
        if not _running(database, config):
            break
    records = read_topic(f"{config.topic_prefix}.public.ck")
    snapshot = [r for r in records if r.op == "r"]
    assert len(hooked) == 5 and sum(s.snapshot_rows_dropped for s in summaries) == 5
    assert len(snapshot) == 450 - 5  # the five rows updated in their windows come as updates instead
    assert len({(r.key_payload["id"], r.key_payload["b"]) for r in snapshot}) == len(snapshot)
    with psycopg.connect(database) as conn:
        table = {(r[0], r[1]): r[2] for r in conn.execute("SELECT id, b, v FROM ck").fetchall()}
    assert {(v["id"], v["b"]): v["v"] for v in replay(records).values()} == table


def _running(dsn: str, config) -> bool:
    with psycopg.connect(dsn) as conn:
        return (
            conn.execute(
                "SELECT count(*) FROM walflow_state WHERE connector = %s AND key = 'incremental'", (config.name,)
            ).fetchone()[0]
            > 0
        )


def test_killed_stream_resumes_at_the_last_finished_chunk(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 6000) g",
    )
    name = unique("incKill")
    raw = {
        "name": name,
        "topic.prefix": name,
        "slot.name": name.lower(),
        "publication.name": name.lower(),
        "signal.data.collection": SIGNALS,
        "snapshot.mode": "no_data",
        "incremental.snapshot.chunk.size": 100,
    }
    config = connector(name, **{k: v for k, v in raw.items() if k != "name"})
    setup(config, database)
    send_signal(database, "execute-snapshot", {"data-collections": ["public.t"]})
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}", "WALFLOW_TEST_ROUND_ROWS": "2000"}
    # rounds select 20 chunks (2,000 rows): dying as the third round starts leaves two rounds saved
    child = subprocess.run(
        [sys.executable, "-m", "tests.integration.crash_child", json.dumps(raw), database, "incremental_chunk", "3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    before = len(read_topic(f"{name}.public.t"))
    assert before == 4000
    with psycopg.connect(database) as conn:
        progress = conn.execute(
            "SELECT value FROM walflow_state WHERE connector = %s AND key = 'incremental'", (name,)
        ).fetchone()[0]
    assert progress["rows"] == 4000 and progress["last_key"] == ["4000"]
    drain(config, database)
    assert len(read_topic(f"{name}.public.t")) == 6000  # resumed, not restarted
    assert topic_state(config) == table_state(database, "t")


def test_wide_rows_make_rounds_of_fewer_rows(
    database: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A round selects chunks until ROUND_ROWS rows, or until its rows take about ROUND_BYTES in memory: rows of
    5 kB in chunks of 100 (about half a megabyte each) make rounds of three chunks; every row is emitted once."""
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, repeat('w', 5000) FROM generate_series(1, 1000) g",
    )
    config = make(database)
    monkeypatch.setattr("walflow.capture.stream.rounds.ROUND_BYTES", 1_200_000)
    signal_id = send_signal(database, "execute-snapshot", {"data-collections": ["public.t"]})
    with caplog.at_level("INFO", logger="walflow.capture.stream"):
        drain(config, database)
    rounds = sum("streaming slot" in r.getMessage() for r in caplog.records)
    assert sorted(r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t")) == list(range(1, 1001))
    assert signal_status(database, config, signal_id)["status"] == "completed"
    assert rounds >= 5, rounds  # ten chunks three at a time, and the batch's last round (one round without the bound)


def test_stop_pause_resume_log_and_bad_signals(
    database: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 500) g",
    )
    config = make(database, **{"walflow.batch.max.events": 1})
    with caplog.at_level("INFO"):
        bad_json = send_signal(database, "execute-snapshot", "{not json")
        unknown = send_signal(database, "make-coffee", {})
        no_tables = send_signal(database, "execute-snapshot", {"data-collections": ["public.nothing"]})
        send_signal(database, "log", {"message": "hello from a signal"})
        stream(config, database)
    assert signal_status(database, config, bad_json)["status"] == "failed"
    assert "not JSON" in signal_status(database, config, bad_json)["error"]
    assert "unknown signal type" in signal_status(database, config, unknown)["error"]
    assert "no captured table matches" in signal_status(database, config, no_tables)["error"]
    assert any("hello from a signal" in r.getMessage() for r in caplog.records)
    assert any(bad_json in r.getMessage() for r in caplog.records if r.levelname == "WARNING")

    topic = f"{config.topic_prefix}.public.t"
    # one chunk (100 rows) per round, and a signal sent at the start of the batch's second chunk round: the
    # signal is then read while the snapshot runs, whatever the machine's speed
    monkeypatch.setattr("walflow.capture.stream.rounds.ROUND_ROWS", 100)

    def at_second_round(kind: str) -> Any:
        rounds = []

        def hook(stage: str) -> None:
            if stage == "incremental_chunk":
                rounds.append(stage)
                if len(rounds) == 2:
                    send_signal(
                        database,
                        kind,
                        {"data-collections": ["public.t"], "type": "incremental"} if kind == "stop-snapshot" else {},
                    )

        return hook

    run_id = send_signal(database, "execute-snapshot", {"data-collections": ["public.t"]})
    send_signal(database, "pause-snapshot", {})
    stream(config, database)
    assert signal_status(database, config, run_id)["status"] == "paused"
    assert read_topic(topic) == []
    send_signal(database, "resume-snapshot", {})
    stream(config, database, fault_hook=at_second_round("pause-snapshot"))
    # round 1 emitted chunk 1; round 2 had selected chunk 2 before the pause was read, then stopped selecting
    assert len(read_topic(topic)) == 200 and signal_status(database, config, run_id)["status"] == "paused"
    stream(config, database)
    assert len(read_topic(topic)) == 200  # paused: nothing more
    send_signal(database, "resume-snapshot", {})
    stream(config, database, fault_hook=at_second_round("stop-snapshot"))
    # resumed: chunk 3; the stop was read before chunk 4's window, so chunk 4 was dropped
    drain(config, database)
    status = signal_status(database, config, run_id)
    assert status["status"] == "stopped" and status["rows"] == 300
    records = read_topic(topic)
    assert len(records) == 300 < 500 and {r.key_payload["id"] for r in records} == set(range(1, 301))
    assert not _running(database, config)


def test_additional_condition_surrogate_key_and_awkward_tables(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE cond (id int PRIMARY KEY, v text, day date)",
        "INSERT INTO cond SELECT g, 'v' || g, date '2024-01-01' + (g % 10) FROM generate_series(1, 300) g",
        "CREATE TABLE nokey (v text, s int)",
        # 125 NULL surrogate keys: more than a chunk, so the rows by ctid take two chunks, the second after a ctid
        "INSERT INTO nokey SELECT 'v' || g, CASE WHEN g % 2 = 0 THEN NULL ELSE g END FROM generate_series(1, 250) g",
        "CREATE TABLE empty (id int PRIMARY KEY, v text)",
        'CREATE SCHEMA "Odd.Schema"',
        'CREATE TABLE "Odd.Schema"."Mixed ""Case""" (id text PRIMARY KEY, v text)',
        'INSERT INTO "Odd.Schema"."Mixed ""Case""" SELECT \'k\' || g, \'v\' || g FROM generate_series(1, 230) g',
        "CREATE TABLE fkey (id float8 PRIMARY KEY, v text)",
        "INSERT INTO fkey VALUES ('NaN', 'nan'), ('Infinity', 'inf'), ('-Infinity', 'ninf'), (1.5, 'x')",
    )
    config = make(database)
    send_signal(
        database,
        "execute-snapshot",
        {"data-collections": ["public.cond"], "additional-condition": "day = '2024-01-03'"},
    )
    drain(config, database)
    rows = read_topic(f"{config.topic_prefix}.public.cond")
    assert len(rows) == 30 and {r.payload["after"]["day"] for r in rows} == {19725}

    send_signal(database, "execute-snapshot", {"data-collections": ["public.nokey"], "surrogate-key": "s"})
    drain(config, database)
    nokey = read_topic(f"{config.topic_prefix}.public.nokey")
    assert sorted(r.payload["after"]["v"] for r in nokey) == sorted(
        f"v{g}" for g in range(1, 251)
    )  # NULL keys included

    send_signal(
        database, "execute-snapshot", {"data-collections": ["public.empty", "Odd\\.Schema\\..*", "public.fkey"]}
    )
    drain(config, database)
    assert read_topic(f"{config.topic_prefix}.public.empty") == []
    odd = read_topic(f"{config.topic_prefix}.Odd.Schema.Mixed__Case_")
    assert len(odd) == 230
    floats = read_topic(f"{config.topic_prefix}.public.fkey")
    assert sorted(str(r.key_payload["id"]) for r in floats) == sorted(["NaN", "Infinity", "-Infinity", "1.5"])


def test_table_added_to_include_list_later(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE a (id int PRIMARY KEY, v text)",
        "CREATE TABLE b (id int PRIMARY KEY, v text)",
        "INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 150) g",
    )
    hand_over(database, "a", "b")  # a 'filtered' publication names only tables its creator owns
    config = make(database, **{"table.include.list": r"public\.a", "publication.autocreate.mode": "filtered"})
    wider = connector(
        config.name,
        **{
            "slot.name": config.slot_name,
            "publication.name": config.publication_name,
            "topic.prefix": config.topic_prefix,
            "signal.data.collection": SIGNALS,
            "snapshot.mode": "no_data",
            "publication.autocreate.mode": "filtered",
            "table.include.list": r"public\.a,public\.b",
            "incremental.snapshot.chunk.size": 100,
        },
    )
    setup(wider, database)  # adds b to the publication
    send_signal(database, "execute-snapshot", {"data-collections": ["public.b"]})
    run_sql(database, "UPDATE b SET v = 'changed' WHERE id = 1")
    drain(wider, database)
    assert topic_state(wider, "b") == table_state(database, "b")


def test_bad_condition_or_surrogate_key_fails_the_signal_not_the_stream(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 300) g",
    )
    config = make(database)
    with caplog.at_level("INFO"):
        bad_condition = send_signal(
            database,
            "execute-snapshot",
            {"data-collections": ["public.t"], "additional-condition": "no_such_column = 1"},
        )
        bad_key = send_signal(
            database, "execute-snapshot", {"data-collections": ["public.t"], "surrogate-key": "no_such_column"}
        )
        # parses and plans fine; fails only on the rows, so while the chunks are read
        bad_rows = send_signal(
            database, "execute-snapshot", {"data-collections": ["public.t"], "additional-condition": "v::int > 0"}
        )
        good = send_signal(
            database, "execute-snapshot", {"data-collections": ["public.t"], "additional-condition": "v LIKE 'v1%'"}
        )
        run_sql(database, "INSERT INTO t VALUES (1000, 'after the signals')")
        drain(config, database)
        run_sql(database, "INSERT INTO t VALUES (1001, 'later')")
        assert stream(config, database).events == 1
    # the cast's failure is told by its SQLSTATE: the server's message would quote the row's value ("v1")
    for signal_id, error in (
        (bad_condition, "no_such_column"),
        (bad_key, "no_such_column"),
        (bad_rows, "SQLSTATE 22P02 (InvalidTextRepresentation)"),
    ):
        status = signal_status(database, config, signal_id)
        assert status["status"] == "failed" and error in status["error"], status
        assert any(signal_id in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert '"v1"' not in signal_status(database, config, bad_rows)["error"]
    assert not any('"v1"' in r.getMessage() for r in caplog.records)
    assert "'additional-condition'" in signal_status(database, config, bad_condition)["error"]
    assert "is not a column of public.t" in signal_status(database, config, bad_key)["error"]
    status = signal_status(database, config, good)
    assert status["status"] == "completed" and status["rows"] == 111  # v1, v10-v19, v100-v199 ('%' reaches the server)
    records = read_topic(f"{config.topic_prefix}.public.t")
    assert sorted(r.key_payload["id"] for r in records if r.op == "r") == sorted(
        i for i in range(1, 301) if str(i).startswith("1")
    )
    assert [r.key_payload["id"] for r in records if r.op == "c"] == [1000, 1001]
    assert not _running(database, config)


def test_a_surrogate_key_the_events_leave_out_fails_the_signal(database: str) -> None:
    """The rows' identities come from the events' columns: a surrogate key that column.exclude.list leaves out of
    them would make every row of a chunk look alike (all but one dropped); the signal fails naming the cause."""
    run_sql(
        database,
        "CREATE TABLE hidden (id int PRIMARY KEY, s int UNIQUE, v text)",
        "INSERT INTO hidden SELECT g, g, 'v' FROM generate_series(1, 150) g",
    )
    config = make(database, **{"column.exclude.list": "public.hidden.s"})
    signal_id = send_signal(database, "execute-snapshot", {"data-collections": ["public.hidden"], "surrogate-key": "s"})
    drain(config, database)
    status = signal_status(database, config, signal_id)
    assert (
        status["status"] == "failed"
        and "'surrogate-key' 's' of public.hidden is not a column of its events" in status["error"]
    ), status
    assert not [r for r in read_topic(f"{config.topic_prefix}.public.hidden") if r.op == "r"]


def test_a_table_whose_events_cannot_be_built_fails_its_signal_not_every_batch(database: str) -> None:
    """A signal for a table whose key column has a type walflow cannot represent fails, once; the stream goes on
    (the error escaped the batch, which read the same signal again the next time, and so on)."""
    run_sql(database, "CREATE TABLE fine (id int PRIMARY KEY)")
    config = make(database)
    # created after setup (which refuses such a table with the same cause), empty, so no change of it is streamed
    run_sql(
        database,
        "CREATE TYPE walflow_pair AS (a int, b int)",
        "CREATE TABLE odd_key (k walflow_pair PRIMARY KEY, v text)",
    )
    signal_id = send_signal(database, "execute-snapshot", {"data-collections": ["public.odd_key"]})
    drain(config, database)
    status = signal_status(database, config, signal_id)
    assert status["status"] == "failed" and "odd_key.k" in status["error"] and "cannot represent" in status["error"], (
        status
    )
    run_sql(database, "INSERT INTO fine VALUES (1)")
    assert stream(config, database).events == 1


def test_a_message_that_only_looks_like_a_watermark_is_logged_and_passed(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Another client writing logical decoding messages with walflow's watermark prefix cannot stop the stream."""
    from walflow.capture.incremental import WATERMARK_PREFIX

    run_sql(database, "CREATE TABLE wm (id int PRIMARY KEY)")
    config = make(database)
    for content in ("[1]", "not json", '"text"'):
        run_sql(database, f"SELECT pg_logical_emit_message(true, '{WATERMARK_PREFIX}', '{content}')")
    run_sql(database, "INSERT INTO wm VALUES (1)")
    with caplog.at_level("WARNING"):
        assert stream(config, database).events >= 1
    assert sum("is not a watermark" in r.getMessage() for r in caplog.records) == 3
    assert [r.op for r in read_topic(f"{config.topic_prefix}.public.wm")] == ["c"]


def test_signals_for_the_same_table_queue_and_each_completes(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 500) g",
        "CREATE TABLE u (id int PRIMARY KEY, v text)",
        "INSERT INTO u VALUES (1, 'u')",
    )
    config = make(database)
    with psycopg.connect(database) as conn:  # one transaction: the stream reads every signal in the same round
        first = send_signal(
            conn, "execute-snapshot", {"data-collections": ["public.t"], "additional-condition": "id <= 150"}
        )
        second = send_signal(
            conn, "execute-snapshot", {"data-collections": ["public.t"], "additional-condition": "id > 420"}
        )
        third = send_signal(conn, "execute-snapshot", {"data-collections": ["public.u"]})
        send_signal(
            conn, "stop-snapshot", {"data-collections": ["public.u"], "type": "incremental"}
        )  # stops the queued one only
    stream(config, database)
    assert signal_status(database, config, first)["status"] == "completed"
    assert signal_status(database, config, second)["status"] in ("running", "completed")
    assert signal_status(database, config, third)["status"] == "stopped"
    drain(config, database)
    assert read_topic(f"{config.topic_prefix}.public.u") == []
    for signal_id, rows in ((first, 150), (second, 80)):
        status = signal_status(database, config, signal_id)
        assert (
            status["status"] == "completed"
            and status["rows"] == rows
            and status["rows_per_table"] == {"public.t": rows}
        )
    ids = [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t")]
    assert ids == list(range(1, 151)) + list(range(421, 501))  # in signal order, each with its own condition
    assert not _running(database, config)


def test_crash_between_saving_progress_and_advancing_the_slot(database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress is saved before the slot advances, so a batch dying in between reads its signals again: the
    execute-snapshot signal is recognised (it is in the saved progress) and no second snapshot starts."""
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 500) g",
    )
    config = make(database)
    monkeypatch.setattr("walflow.capture.stream.rounds.ROUND_ROWS", 100)  # one chunk per round
    run_id = send_signal(database, "execute-snapshot", {"data-collections": ["public.t"]})

    def die(stage: str) -> None:
        if stage == "incremental_saved":
            raise RuntimeError("the batch died after saving its progress, before advancing the slot")

    with pytest.raises(RuntimeError, match="before advancing the slot"):
        stream(config, database, fault_hook=die)
    with psycopg.connect(database) as conn:
        saved = conn.execute(
            "SELECT value FROM walflow_state WHERE connector = %s AND key = 'incremental'", (config.name,)
        ).fetchone()
    # the round read the signal (its chunks come in the next round); the slot still stands before the signal
    assert saved is not None and saved[0]["signal_id"] == run_id and saved[0]["rows"] == 0 and not saved[0]["queued"]
    drain(config, database)
    topic = f"{config.topic_prefix}.public.t"
    ids = [r.key_payload["id"] for r in read_topic(topic)]
    assert sorted(ids) == list(range(1, 501))  # every row once: no second snapshot from the signal read again
    status = signal_status(database, config, run_id)
    assert status["status"] == "completed" and status["rows"] == 500
    assert not _running(database, config)


def test_signals_read_again_after_a_crash_do_not_act_twice(database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pause sent while nothing runs, then an execute-snapshot, in one transaction; the batch dies after saving,
    before advancing the slot. Read again, the pause must not hit the snapshot that started after it."""
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 300) g",
    )
    config = make(database)
    monkeypatch.setattr("walflow.capture.stream.rounds.ROUND_ROWS", 100)
    with psycopg.connect(database) as conn:
        send_signal(conn, "pause-snapshot", {})  # nothing runs yet: no effect
        run_id = send_signal(conn, "execute-snapshot", {"data-collections": ["public.t"]})

    def die(stage: str) -> None:
        if stage == "incremental_saved":
            raise RuntimeError("the batch died after saving its progress, before advancing the slot")

    with pytest.raises(RuntimeError):
        stream(config, database, fault_hook=die)
    drain(config, database)
    status = signal_status(database, config, run_id)
    assert status["status"] == "completed" and status["rows"] == 300, status
    assert sorted(r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t")) == list(range(1, 301))


def test_table_without_primary_key_needs_a_surrogate_key(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE nokey (v text, doc json)",
        "INSERT INTO nokey SELECT 'v' || g, '{}' FROM generate_series(1, 10) g",
    )
    config = make(database)
    refused = send_signal(database, "execute-snapshot", {"data-collections": ["public.nokey"]})
    # a valid condition with a surrogate key the server cannot order by: the key is blamed, not the condition
    unorderable = send_signal(
        database,
        "execute-snapshot",
        {"data-collections": ["public.nokey"], "additional-condition": "v LIKE 'v%'", "surrogate-key": "doc"},
    )
    drain(config, database)
    status = signal_status(database, config, refused)
    assert (
        status["status"] == "failed" and "no primary key" in status["error"] and "surrogate-key" in status["error"]
    ), status
    status = signal_status(database, config, unorderable)
    assert status["status"] == "failed" and status["error"].startswith(
        "'surrogate-key' 'doc' does not work on public.nokey"
    ), status
    assert read_topic(f"{config.topic_prefix}.public.nokey") == []


# alone: it makes every commit on the server wait for a synchronous standby that does not exist
@pytest.mark.disruptive
def test_a_delete_committed_before_the_window_but_unseen_by_the_select_is_not_undone(database: str) -> None:
    """A transaction writes its commit before the low watermark yet is still invisible when the chunk's SELECT takes
    its snapshot (here: waiting for a synchronous standby; on any server, for a moment: waiting for its WAL flush).
    Its delete is streamed before the window opens, so only the SELECT's snapshot (transactions not yet completed)
    tells that the row it read is stale."""
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 300) g",
    )
    # walflow's own commits must not wait for the absent standby
    config = make(database, **{"database.initial.statements": "SET synchronous_commit TO local"})
    send_signal(database, "execute-snapshot", {"data-collections": ["public.t"]})
    deleter = psycopg.connect(database)
    pid = deleter.info.backend_pid
    committing = threading.Thread(target=deleter.commit)  # written to the WAL, then waits for the standby

    def delete_before_the_first_chunk(stage: str) -> None:
        # the round that reads the signal has streamed; the next one is about to select the first chunk
        if stage != "incremental_chunk" or committing.is_alive() or committing.ident:
            return
        deleter.execute("DELETE FROM t WHERE id = 50")
        committing.start()
        with psycopg.connect(database, autocommit=True) as watcher:
            for _ in range(500):
                (waiting,) = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event = 'SyncRep'", (pid,)
                ).fetchone()
                if waiting:
                    return
                threading.Event().wait(0.01)
        raise AssertionError("the delete never waited for the standby")

    released: list[int] = []

    def release(_table: str, rows: list[Any]) -> None:
        # the SELECT has run without seeing the delete; now let the delete show (it committed before the window)
        if not released and committing.is_alive():
            released.append(len(rows))
            run_sql(database, f"SELECT pg_cancel_backend({pid})")
            committing.join(timeout=30)

    try:
        run_sql(
            database, "ALTER SYSTEM SET synchronous_standby_names = 'walflow_absent_standby'", "SELECT pg_reload_conf()"
        )
        time.sleep(1.0)  # the reload reaches the server's processes asynchronously
        stream(config, database, fault_hook=delete_before_the_first_chunk, chunk_hook=release)
        assert released and released[0] == 100
    finally:
        run_sql(database, "ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()")
        if committing.is_alive():
            run_sql(database, f"SELECT pg_cancel_backend({pid})")
            committing.join(timeout=30)
        deleter.close()
    drain(config, database)
    snapshot_ids = [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t") if r.op == "r"]
    assert 50 not in snapshot_ids and len(snapshot_ids) == 299
    assert topic_state(config) == table_state(database, "t")


def test_a_change_committed_after_the_high_watermark_sorts_after_the_chunk_rows(database: str) -> None:
    """A transaction writes a change before a chunk's SELECT and commits only after the chunk's high watermark: the
    SELECT does not see it, the chunk emits the old row, and the change is streamed after it. The change must come
    last by source position too (what the lake orders by), or the lake keeps the old row: the high watermark needs
    a commit of its own between the chunk's rows and the changes streamed after them."""
    from walflow.lake.positions import source_position

    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 300) g",
    )
    config = make(database)
    send_signal(database, "execute-snapshot", {"data-collections": ["public.t"]})
    writer = psycopg.connect(database)
    chunks: list[int] = []

    def change_before_the_first_chunk(stage: str) -> None:
        if (
            stage == "incremental_chunk"
            and not chunks
            and writer.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        ):
            writer.execute("UPDATE t SET v = 'late' WHERE id = 50")  # row 50 is in the first chunk (ids 1-100)

    def commit_after_the_first_window(_table: str, rows: list[Any]) -> None:
        chunks.append(len(rows))
        if len(chunks) == 2:  # the first chunk's high watermark is written
            writer.commit()

    try:
        stream(config, database, fault_hook=change_before_the_first_chunk, chunk_hook=commit_after_the_first_window)
    finally:
        writer.close()
    assert len(chunks) >= 2
    drain(config, database)
    records = [r for r in read_topic(f"{config.topic_prefix}.public.t") if r.key_payload["id"] == 50]
    assert [(r.op, (r.payload["after"] or {}).get("v")) for r in records] == [("r", "v50"), ("u", "late")]
    snapshot_row, change = (source_position(r.payload["source"], r.payload.get("transaction")) for r in records)
    assert snapshot_row < change, (records[0].payload["source"], records[1].payload["source"])
    assert topic_state(config) == table_state(database, "t")


def test_a_chunk_failing_on_the_server_leaves_its_connection_idle_and_logs_only_the_cause(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A chunk's statements go to the server as one pipeline: when one fails, the caller gets the server's error,
    the connection is idle again, the cursor has not moved, and psycopg logs nothing of its own (leaving a pipeline
    in its aborted state made it warn "pipeline aborted", which named no cause)."""
    from psycopg import sql

    from walflow.capture.incremental.chunks import ChunkReader
    from walflow.capture.incremental.marks import Watermarks
    from walflow.capture.incremental.progress import SnapshotProgress
    from walflow.config.filters import Filters
    from walflow.records.column_rules import ColumnRules
    from walflow.records.events import Serializer

    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 300) g",
    )
    config = make(database)
    with psycopg.connect(database, autocommit=True) as conn:
        reader = ChunkReader(config, conn, Filters(config), Serializer(True, True), ColumnRules(config))
        table = reader.plan("public.t", None, None)
        assert table is not None
        progress = SnapshotProgress(signal_id="s", tables=["public.t"], max_key=reader.max_key(table))
        # the second statement fails, so the server's error tends to show while the later ones are still being queued
        reader._timeout_sql = lambda: sql.SQL("SET LOCAL statement_timeout = 'not a duration'")  # type: ignore[method-assign]
        for _ in range(5):
            with caplog.at_level("WARNING"), pytest.raises(psycopg.errors.InvalidParameterValue):
                reader.read_chunk(table, progress, "walflow.test", "low", "high", Watermarks())
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert progress.last_key is None
        assert not [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]
        del reader._timeout_sql  # the real one again: the same connection reads the chunk
        read = reader.read_chunk(table, progress, "walflow.test", "low", "high", Watermarks())
        assert [int(r[0]) for r in read.rows] == list(range(1, 101)) and progress.last_key == ["100"]


def test_kafka_signals_are_taken_once_and_others_keys_passed_over(database: str) -> None:
    """The Kafka signal channel: a signal keyed by the connector's prefix runs; one keyed for another connector is
    passed over; the offsets saved with the progress keep a later batch from taking either again, and a blocking
    snapshot sent the same way reads the table whole and records its rows."""
    from confluent_kafka import Producer

    from tests.support import bootstrap

    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 30) g",
    )
    config = make(database, **{"signal.enabled.channels": "source,kafka"})
    producer = Producer({"bootstrap.servers": bootstrap()})
    for key, signal_id, kind in (
        (config.topic_prefix, "k1", "incremental"),
        ("someone-else", "k2", "incremental"),
        (config.topic_prefix, "k3", "blocking"),
    ):
        value = {"id": signal_id, "type": "execute-snapshot", "data": {"data-collections": ["public.t"], "type": kind}}
        producer.produce(config.signal_topic, json.dumps(value).encode(), key.encode())
    assert producer.flush(30) == 0
    drain(config, database)
    assert signal_status(database, config, "k1")["status"] == "completed"
    assert signal_status(database, config, "k2") is None
    blocking = signal_status(database, config, "k3")
    assert blocking["status"] == "completed" and blocking["type"] == "blocking" and blocking["rows"] == 30
    with psycopg.connect(database) as conn:
        saved = conn.execute(
            "SELECT value FROM walflow_state WHERE connector = %s AND key = 'kafka_signals'", (config.name,)
        ).fetchone()
    assert saved is not None and sum(saved[0].values()) >= 1  # every partition that held one of the three, to its last
    before = len(read_topic(f"{config.topic_prefix}.public.t"))
    assert before == 60  # 30 rows by each snapshot
    summary = stream(config, database)
    assert summary.snapshot_rows == 0 and len(read_topic(f"{config.topic_prefix}.public.t")) == before


@pytest.mark.parametrize("allow", [True, False], ids=["allowed", "not-allowed"])
def test_a_table_redefined_during_its_incremental_snapshot(
    database: str, allow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """incremental.snapshot.allow.schema.changes: a column added and one dropped between two chunks of a table's
    incremental snapshot. Allowed, the table's definition is checked before each chunk and the chunks after the
    change are read with its new columns, so every row is read once and the topic replays to the table; not allowed
    (Debezium's default), the chunks go on with the definition planned when the snapshot reached the table, whose
    dropped column no longer exists: the signal fails, naming it, and streaming goes on."""
    # more rows than a round of the stream reads (ROUND_ROWS, made small): the change comes between the first round's
    # chunks and the second's (the stream's seam before each round's chunks)
    monkeypatch.setattr(stream_rounds, "ROUND_ROWS", 2000)
    rows = 2500
    run_sql(
        database,
        "CREATE TABLE redefined (id int PRIMARY KEY, a text, gone int)",
        f"INSERT INTO redefined SELECT g, 'r' || g, g FROM generate_series(1, {rows}) g",
    )
    config = make(
        database,
        **{"incremental.snapshot.allow.schema.changes": allow, "incremental.snapshot.chunk.size": 500},
    )
    signal_id = send_signal(database, "execute-snapshot", {"data-collections": ["public.redefined"]})
    rounds: list[int] = []

    def redefine_before_the_second_round(point: str) -> None:
        if point == "incremental_chunk":
            rounds.append(1)
            if len(rounds) == 2:
                run_sql(
                    database,
                    "ALTER TABLE redefined ADD COLUMN b text DEFAULT 'x'",
                    "ALTER TABLE redefined DROP COLUMN gone",
                    f"INSERT INTO redefined VALUES ({rows + 1}, 'new', 'y')",
                )

    for _ in range(10):
        stream(config, database, fault_hook=redefine_before_the_second_round)
        if not _running(database, config):
            break
    stream(config, database)
    assert len(rounds) >= 2
    records = read_topic(f"{config.topic_prefix}.public.redefined")
    snapshot = [r for r in records if r.op == "r"]
    if allow:
        assert signal_status(database, config, signal_id)["status"] == "completed"
        assert sorted(r.key_payload["id"] for r in snapshot) == list(range(1, rows + 1))
        before = [r for r in snapshot if "gone" in r.payload["after"]]
        after = [r for r in snapshot if "b" in r.payload["after"]]
        assert before and after and len(before) + len(after) == len(snapshot)
        assert all(r.payload["after"]["b"] == "x" for r in after)
        with psycopg.connect(database) as conn:
            table = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, a, b FROM redefined").fetchall()}
        assert {v["id"]: (v["a"], v.get("b", "x")) for v in replay(records).values()} == table
    else:
        status = signal_status(database, config, signal_id)
        assert status["status"] == "failed" and "gone" in status["error"], status
        assert 0 < len(snapshot) < rows
        assert [r.key_payload["id"] for r in records if r.op == "c"] == [rows + 1]  # streaming went on
