"""Issue 29: the lake equals the source through the schema changes real databases go through (renames, columns
added and their defaults changed, columns dropped and added again, per-row defaults), keyed and keyless, whether
the lake runs between the steps or once after all of them. Real PostgreSQL, broker, Spark and Iceberg; each test
compares every row of the lake with the source (tests.lakecheck)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.lakecheck import differences
from tests.support import apply_lake, connector, setup, stream, unique
from walflow.errors import DriftError, LakeSchemaError
from walflow.lake.naming import table_name

#: in make test's lane alone, whose Spark session it shares with the fault suite's disruptive tests (Makefile)
pytestmark = [pytest.mark.timeout(900), pytest.mark.spark, pytest.mark.alone, pytest.mark.long]


def run(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def catch_up(spark: Any, config: Any, dsn: str) -> list[dict[str, Any]]:
    """Stream until the slot is drained (re-reads included), then apply the lake."""
    for _ in range(20):
        summary = stream(config, dsn)
        if not summary.events and not getattr(summary, "rereads", None) and not summary.snapshot_rows:
            break
    return apply_lake(spark, config)


def assert_equal(config: Any, dsn: str, *tables: str) -> None:
    found = [d for t in tables for d in differences(dsn, config.topic_prefix, table_name("public", t), "public", t)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("between", [False, True], ids=["one-run", "run-between"])
def test_renames_and_defaults_reach_the_lake_as_the_source_has_them(spark: Any, database: str, between: bool) -> None:
    """The issue's reproductions, each on a keyed and a keyless table: a rename (events before it in the same run
    included), ADD COLUMN then SET DEFAULT (the older rows stay NULL, and the keyless table is not refused: its
    storage was not rewritten), ADD COLUMN DEFAULT then SET DEFAULT, ADD COLUMN DEFAULT then DROP
    DEFAULT, an array default on a keyless table followed by an update of one of two equal rows, and a column
    dropped and added again under its old name. With ``between`` the lake runs after every step (each step ends
    with a change of the table: the lake learns a definition from the events)."""
    dsn = database
    config = connector(unique("truth"))
    run(
        dsn,
        "CREATE TABLE k (id int PRIMARY KEY, name text, a int)",
        "CREATE TABLE kl (id int, name text, a int)",
        "ALTER TABLE kl REPLICA IDENTITY FULL",
        "INSERT INTO k SELECT g, 'n' || g, g FROM generate_series(1, 4) g",
        "INSERT INTO kl VALUES (1, 'x', 1), (1, 'x', 1), (2, 'y', 2)",
    )
    setup(config, dsn)
    if between:
        catch_up(spark, config, dsn)
    steps = [
        [
            "UPDATE k SET name = 'before-rename' WHERE id = 1",
            "ALTER TABLE k RENAME COLUMN name TO title",
            "UPDATE k SET title = 'after' WHERE id = 2",
            "ALTER TABLE kl RENAME COLUMN name TO title",
            "UPDATE kl SET a = 10 WHERE id = 2",
        ],
        [
            "ALTER TABLE k ADD COLUMN x1 int",
            "ALTER TABLE k ALTER COLUMN x1 SET DEFAULT 7",
            "INSERT INTO k (id, title) VALUES (5, 'new')",
            "ALTER TABLE k ADD COLUMN x2 int DEFAULT 5",
            "ALTER TABLE k ALTER COLUMN x2 SET DEFAULT 6",
            "INSERT INTO k (id, title) VALUES (6, 'six')",
            "ALTER TABLE kl ADD COLUMN x1 int",
            "ALTER TABLE kl ALTER COLUMN x1 SET DEFAULT 7",
            "ALTER TABLE kl ADD COLUMN x2 int DEFAULT 5",
            "ALTER TABLE kl ALTER COLUMN x2 SET DEFAULT 6",
            "UPDATE kl SET a = a WHERE id = 2",
        ],
        [
            "ALTER TABLE k ADD COLUMN x3 text DEFAULT 'old'",
            "ALTER TABLE k ALTER COLUMN x3 DROP DEFAULT",
            "UPDATE k SET a = a + 1 WHERE id = 3",
            "ALTER TABLE kl ADD COLUMN x3 text DEFAULT 'old'",
            "ALTER TABLE kl ALTER COLUMN x3 DROP DEFAULT",
            "UPDATE kl SET a = a WHERE id = 2",
        ],
        [
            "ALTER TABLE kl ADD COLUMN x4 int[] DEFAULT ARRAY[1, 2]",
            "UPDATE kl SET title = 'z' WHERE ctid = (SELECT min(ctid) FROM kl WHERE id = 1)",
        ],
        [
            "ALTER TABLE k DROP COLUMN a",
            "ALTER TABLE k ADD COLUMN a int DEFAULT 9",
            "UPDATE k SET title = 'readded' WHERE id = 4",
            "ALTER TABLE kl DROP COLUMN a",
            "ALTER TABLE kl ADD COLUMN a int DEFAULT 9",
            "UPDATE kl SET title = 'w' WHERE id = 2",
        ],
    ]
    for statements in steps:
        run(dsn, *statements)
        if between:
            catch_up(spark, config, dsn)
            assert_equal(config, dsn, "k", "kl")
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, "k", "kl")


def test_a_per_row_default_is_re_read_on_a_keyed_table_and_refused_on_a_keyless_one(spark: Any, database: str) -> None:
    """``ADD COLUMN ... DEFAULT random()`` gives every existing row its own value without an event: the stream
    re-reads the keyed table itself (an incremental snapshot, in the batch's summary) and the lake converges; the
    keyless table's topic stops with the cause and the fix, the other topics are applied."""
    dsn = database
    config = connector(unique("vol"))
    run(
        dsn,
        "CREATE TABLE v (id int PRIMARY KEY, n int)",
        "CREATE TABLE vl (id int, n int)",
        "ALTER TABLE vl REPLICA IDENTITY FULL",
        "INSERT INTO v SELECT g, g FROM generate_series(1, 30) g",
        "INSERT INTO vl SELECT g, g FROM generate_series(1, 3) g",
    )
    setup(config, dsn)
    apply_lake(spark, config)
    run(
        dsn,
        "ALTER TABLE v ADD COLUMN r float8 DEFAULT random()",
        "ALTER TABLE vl ADD COLUMN r float8 DEFAULT random()",
        "INSERT INTO v (id, n) VALUES (31, 31)",
        "INSERT INTO vl (id, n) VALUES (4, 4)",
    )
    summary = stream(config, dsn)
    assert [r["table"] for r in summary.rereads] == ["public.v"], summary.rereads
    with pytest.raises(LakeSchemaError) as refused:
        catch_up(spark, config, dsn)
    message = str(refused.value)
    # the rewrite of the keyless table, found when the next batch read the catalog (walflow.source.watch)
    assert "no primary key" in message and "['r']" in message and "walflow reset" in message, message
    assert_equal(config, dsn, "v")


def test_soft_deletes_keep_the_last_values_of_a_row_inserted_and_deleted_in_one_run(spark: Any, database: str) -> None:
    """With ``walflow.lake.delete.mode: soft`` a deleted row stays, flagged, with its last values: also a row inserted
    (or updated) and deleted within one run, whose delete event under REPLICA IDENTITY DEFAULT carries the key alone."""
    from tests.support import lake_rows

    dsn = database
    config = connector(unique("soft"), **{"walflow.lake.delete.mode": "soft"})
    run(
        dsn,
        "CREATE TABLE s (id int PRIMARY KEY, v text NOT NULL, n int)",
        "INSERT INTO s VALUES (1, 'one', 1), (2, 'two', 2)",
    )
    setup(config, dsn)
    apply_lake(spark, config)
    run(
        dsn,
        "INSERT INTO s VALUES (3, 'three', 3)",
        "DELETE FROM s WHERE id = 3",
        "UPDATE s SET v = 'uno' WHERE id = 1",
        "DELETE FROM s WHERE id = 1",
        "DELETE FROM s WHERE id = 2",
    )
    catch_up(spark, config, dsn)
    rows = {r["id"]: (r["v"], r["n"], r["_walflow_deleted"]) for r in lake_rows(config.topic_prefix, "public__s")}
    assert rows == {1: ("uno", 1, True), 2: ("two", 2, True), 3: ("three", 3, True)}, rows


def test_soft_deletes_of_a_table_without_key_flag_every_row_removed(spark: Any, database: str) -> None:
    """A table without key (REPLICA IDENTITY FULL) with soft deletes: every copy a delete or an update removed stays,
    flagged, also a row inserted and deleted (or updated) within one run, whose value nets to nothing; the live rows
    equal the source."""
    from tests.support import lake_rows

    dsn = database
    config = connector(unique("softkl"), **{"walflow.lake.delete.mode": "soft"})
    run(
        dsn,
        "CREATE TABLE sk (x int, y text)",
        "ALTER TABLE sk REPLICA IDENTITY FULL",
        "INSERT INTO sk VALUES (1, 'a'), (1, 'a'), (2, 'b')",
    )
    setup(config, dsn)
    apply_lake(spark, config)
    run(
        dsn,
        "INSERT INTO sk VALUES (3, 'c')",
        "DELETE FROM sk WHERE x = 3",
        "INSERT INTO sk VALUES (4, 'd')",
        "UPDATE sk SET y = 'e' WHERE x = 4",
        "DELETE FROM sk WHERE ctid = (SELECT min(ctid) FROM sk WHERE x = 1)",
        "UPDATE sk SET y = 'f' WHERE x = 2",
    )
    catch_up(spark, config, dsn)
    rows = sorted((r["x"], r["y"], r["_walflow_deleted"]) for r in lake_rows(config.topic_prefix, "public__sk"))
    assert rows == [
        (1, "a", False),
        (1, "a", True),
        (2, "b", True),
        (2, "f", False),
        (3, "c", True),
        (4, "d", True),
        (4, "e", False),
    ], rows


def test_deletes_under_an_identity_index_without_the_key_remove_the_right_row(spark: Any, database: str) -> None:
    """``REPLICA IDENTITY USING INDEX`` on a unique index that does not hold the primary key: Debezium keys a delete
    ``{id: 0}`` (the key zero-filled, its old row holding the index's columns). The lake deletes the row the index's
    values name, not a genuine row 0, in one run with other changes and in a run of its own. A key change that
    leaves the index's columns as they were comes with no old row (an update of the new key only): the row that
    held those values under the old key is superseded, in the run that inserts the row too and in a later one, and
    its unchanged TOASTed values (placeholders in the update) are the old key's row's."""
    dsn = database
    config = connector(unique("ident"))
    run(
        dsn,
        "CREATE TABLE u (id int PRIMARY KEY, code text NOT NULL, n int, doc text)",
        "CREATE UNIQUE INDEX u_code ON u (code)",
        "ALTER TABLE u REPLICA IDENTITY USING INDEX u_code",
        "INSERT INTO u SELECT g, 'c' || g, g FROM generate_series(0, 9) g",
        f"UPDATE u SET doc = {BIG.format(salt='id')} WHERE id IN (6, 9)",
    )
    setup(config, dsn)
    catch_up(spark, config, dsn)
    run(
        dsn,
        "UPDATE u SET n = -1 WHERE id = 4",
        "DELETE FROM u WHERE id = 3",
        "DELETE FROM u WHERE code = 'c5'",
        "INSERT INTO u VALUES (11, 'c3', 33)",
        "UPDATE u SET id = 100 WHERE id = 6",
        f"INSERT INTO u VALUES (12, 'c12', 12, {BIG.format(salt=12)})",
        "UPDATE u SET id = 120 WHERE id = 12",
    )
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, "u")
    run(
        dsn,
        "DELETE FROM u WHERE id IN (7, 8)",
        "UPDATE u SET id = 300 WHERE id = 100",
        "UPDATE u SET id = 200, n = 5 WHERE id = 9",
    )
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, "u")


#: 9,600 characters that do not compress: stored out of line, so an update that leaves them sends a placeholder
BIG = "(SELECT string_agg(md5(i::text || {salt}), '') FROM generate_series(1, 300) i)"


def test_a_key_change_keeps_the_unchanged_toasted_values(spark: Any, database: str) -> None:
    """``UPDATE t SET id = 2 WHERE id = 1`` under REPLICA IDENTITY DEFAULT, with TOASTed text and array columns left
    unchanged: the create of the new key holds placeholders, and the values are the old key's, found in the lake row
    (a row the lake had), in an earlier event of the batch (a row inserted in the same run), and through two key
    changes and an update in one run."""
    dsn = database
    config = connector(unique("moved"))
    big = BIG.format(salt="'a'")
    run(
        dsn,
        "CREATE TABLE t (id int PRIMARY KEY, n int, doc text, tags text[])",
        f"INSERT INTO t VALUES (1, 1, {big}, ARRAY[{big}, 'x']),"
        f" (5, 5, {BIG.format(salt=chr(39) + 'b' + chr(39))}, NULL)",
    )
    setup(config, dsn)
    catch_up(spark, config, dsn)
    run(
        dsn,
        "UPDATE t SET id = 2 WHERE id = 1",  # the value is in the lake only
        f"INSERT INTO t VALUES (3, 3, {BIG.format(salt=chr(39) + 'c' + chr(39))}, ARRAY['y'])",
        "UPDATE t SET id = 4 WHERE id = 3",  # the value is in an earlier event of the run
        "UPDATE t SET id = 6 WHERE id = 5",
        "UPDATE t SET id = 7 WHERE id = 6",
        "UPDATE t SET n = 70 WHERE id = 7",
    )
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, "t")


def test_a_key_redefined_within_a_run_merges_each_event_by_its_own_key(spark: Any, database: str) -> None:
    """``(id)`` becomes ``(id, region)`` between two changes that reach the lake in one run (the stream stops at the new
    key until the setup accepts it), and a second row takes an id the first has: merging every event by one key
    would collapse them. The run applies the events before the new
    key by the old one, the next run the rest by the new one; the lake equals the source."""
    dsn = database
    config = connector(unique("rekey"))
    run(
        dsn,
        "CREATE TABLE r (id int PRIMARY KEY, region text NOT NULL, v int)",
        "INSERT INTO r VALUES (1, 'eu', 1), (2, 'eu', 2)",
    )
    setup(config, dsn)
    catch_up(spark, config, dsn)
    run(
        dsn,
        "UPDATE r SET v = 10 WHERE id = 1",
        "ALTER TABLE r DROP CONSTRAINT r_pkey",
        "ALTER TABLE r ADD PRIMARY KEY (id, region)",
        "INSERT INTO r VALUES (1, 'us', 100)",
        "UPDATE r SET v = 20 WHERE id = 2",
        "DELETE FROM r WHERE id = 1 AND region = 'eu'",
        "INSERT INTO r VALUES (3, 'us', 3), (3, 'eu', 3)",
    )
    # the stream stops at the new key until the setup accepts it (walflow.capture.drift):
    # then both keys are in the topic
    with pytest.raises(DriftError):
        stream(config, dsn)
    setup(config, dsn)
    stream(config, dsn)
    first = apply_lake(spark, config)
    assert first[0]["backlog"] > 0, first  # cut where the key changed
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, "r")


def test_a_table_that_loses_its_key_within_a_run_is_applied_as_rows_from_then_on(spark: Any, database: str) -> None:
    """The primary key is dropped (REPLICA IDENTITY FULL from then on) between two changes that reach the lake in one
    run, and rows then repeat an id: merged by the old key they would collapse. The run applies the events before
    the key went by the key, the next run the rest as rows of a table without key; the lake equals the source."""
    dsn = database
    config = connector(unique("unkey"))
    run(dsn, "CREATE TABLE q (id int PRIMARY KEY, v text)", "INSERT INTO q VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    setup(config, dsn)
    catch_up(spark, config, dsn)
    run(
        dsn,
        "UPDATE q SET v = 'a1' WHERE id = 1",
        "ALTER TABLE q DROP CONSTRAINT q_pkey",
        "ALTER TABLE q REPLICA IDENTITY FULL",
        "INSERT INTO q VALUES (1, 'again'), (2, 'b')",
        "UPDATE q SET v = 'b2' WHERE ctid = (SELECT min(ctid) FROM q WHERE id = 2)",
        "DELETE FROM q WHERE id = 3",
        "INSERT INTO q VALUES (4, 'd'), (4, 'd')",
    )
    stream(config, dsn)
    first = apply_lake(spark, config)
    assert first[0]["backlog"] > 0, first  # cut where the key went
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, "q")


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_a_delete_that_survives_only_as_its_tombstone_is_applied(spark: Any, database: str, mode: str) -> None:
    """A compacted topic keeps, of a deleted row, only its tombstone (compaction removes the delete and every older
    record of the key; the tombstone stays for delete.retention.ms). The broker here does not compact, so the topic
    is given what compaction leaves: tombstones of rows deleted in the source, without their delete events (the
    keys' bytes are those of the rows' own records). The lake removes (soft: flags) those rows, and a row re-inserted
    after its tombstone stays; the deletes streamed later change nothing more. The changelog records no event for a
    lone tombstone."""
    from confluent_kafka import Producer

    from tests.support import bootstrap, lake_rows, read_topic

    dsn = database
    config = connector(unique("tomb"), **{"walflow.lake.delete.mode": mode, "walflow.lake.changelog": "true"})
    run(
        dsn,
        "CREATE TABLE g (id int PRIMARY KEY, v text)",
        "INSERT INTO g SELECT i, 'v' || i FROM generate_series(1, 5) i",
    )
    setup(config, dsn)
    catch_up(spark, config, dsn)
    topic = f"{config.topic_prefix}.public.g"
    records = {r.key_payload["id"]: r for r in read_topic(topic) if r.op == "r"}
    run(dsn, "DELETE FROM g WHERE id IN (2, 3, 4)")
    producer = Producer({"bootstrap.servers": bootstrap()})
    for key in (2, 3, 4):
        producer.produce(topic, key=records[key].raw_key, value=None, partition=records[key].partition)
    producer.flush(10)
    run(dsn, "INSERT INTO g VALUES (4, 'again')")  # streamed after the tombstone: newer
    apply_lake(spark, config)  # the tombstones alone
    if mode == "hard":
        assert sorted(r["id"] for r in lake_rows(config.topic_prefix, "public__g")) == [1, 5]
    else:
        flagged = {r["id"]: (r["v"], r["_walflow_deleted"]) for r in lake_rows(config.topic_prefix, "public__g")}
        assert flagged == {1: ("v1", False), 2: ("v2", True), 3: ("v3", True), 4: ("v4", True), 5: ("v5", False)}, (
            flagged
        )
    assert not [r for r in lake_rows(config.topic_prefix, "public__g__changelog") if r["_walflow_op"] != "r"]
    catch_up(spark, config, dsn)
    if mode == "hard":
        assert_equal(config, dsn, "g")
    else:
        live = {r["id"]: r["v"] for r in lake_rows(config.topic_prefix, "public__g") if not r["_walflow_deleted"]}
        assert live == {1: "v1", 4: "again", 5: "v5"}, live


def test_after_a_reset_the_rebuilt_lake_starts_at_the_new_snapshot(
    spark: Any, database: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row deleted after the last batch, then ``walflow reset --lake`` (slot, state and lake tables dropped; the
    topics stay) and the setup's new snapshot: read from offset 0, the topic's old records would bring the row back,
    since its delete was never streamed. The initial snapshot records where the topics ended before its rows (a start
    fact on the schema topic), and a lake table that applied nothing yet starts there: the lake equals the source."""
    from tests.privileges import as_connector
    from walflow.admin.cli import main
    from walflow.config.files import load_config

    dsn = database
    name = unique("restart")
    run(
        dsn,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 4) g",
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ntopic.prefix: {name}\nslot.name: {name.lower()}\npublication.name: {name.lower()}\n"
    )
    monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(tmp_path))
    config = load_config(path)
    setup(config, dsn)
    run(dsn, "UPDATE t SET v = 'changed' WHERE id = 1")
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, "t")
    run(dsn, "DELETE FROM t WHERE id = 2", "INSERT INTO t VALUES (5, 'v5')")  # never streamed: the slot goes
    assert main(["reset", name, "--lake", "--dsn", as_connector(dsn)]) == 0, capsys.readouterr()
    setup(config, dsn)
    results = catch_up(spark, config, dsn)
    assert_equal(config, dsn, "t")
    assert sum(r["records"] for r in results) == 4, results  # the new snapshot's rows only


@pytest.mark.parametrize("between", [False, True], ids=["one-run", "snapshot-applied-first"])
def test_the_first_transaction_after_the_snapshot_is_newer_than_the_snapshot_rows(
    spark: Any, database: str, between: bool
) -> None:
    """A transaction that wrote a row before the slot's consistent point and committed after it is not in the
    initial snapshot (which holds the row's older value) and is the first one streamed: its ``source.sequence`` is
    [null, L] with L below the consistent point. Applied in one run with the snapshot's rows, or in the run after
    them (a lake row is changed only by an event at or after its position), it must win.

    The slot's snapshot builder is walked through its states by hand: a transaction running when the slot is
    created (``t1``) keeps it building; one started then (``t3``) is still running when the builder reaches its
    full snapshot, so the writer (``t2``), started after that, is decoded but commits after the consistent point
    (while the snapshot reads, before the setup's own writes). A CHECKPOINT logs the running transactions the
    builder moves on."""
    import threading
    import time

    from tests.support import read_topic

    dsn = database
    config = connector(unique("firsttx"))
    run(dsn, "CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'before'), (2, 'kept')")
    t1, t2, t3 = (psycopg.connect(dsn) for _ in range(3))
    try:
        t1.execute("SELECT txid_current()")
        done: dict[str, Any] = {}

        def commit_t2(stage: str) -> None:
            # t2 commits while the snapshot reads (it does not see it), before the setup's own writes: so it is the
            # first transaction the stream decodes
            if stage == "snapshot_row" and not done.get("t2"):
                done["t2"] = True
                t2.commit()

        worker = threading.Thread(
            target=lambda: done.update(report=setup(config, dsn, fault_hook=commit_t2)), daemon=True
        )
        worker.start()
        with psycopg.connect(dsn, autocommit=True) as watch:
            for _ in range(600):
                if watch.execute(
                    "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
                ).fetchone():
                    break
                time.sleep(0.1)
            else:
                pytest.fail("the setup never started creating its slot")
            t3.execute("SELECT txid_current()")
            t1.commit()
            watch.execute("CHECKPOINT")  # the builder's full snapshot: t3 still runs
            t2.execute("UPDATE t SET v = 'after' WHERE id = 1")
            t3.commit()
            watch.execute("CHECKPOINT")  # consistent: after t2's change, before its commit
        worker.join(120)
        assert "report" in done and done.get("t2"), "the setup did not finish"
    finally:
        for conn in (t1, t2, t3):
            conn.close()
    if between:
        apply_lake(spark, config)
    stream(config, dsn)
    update = [r for r in read_topic(f"{config.topic_prefix}.public.t") if r.op == "u"]
    assert len(update) == 1, [r.payload for r in update]
    sequence, lsn = update[0].payload["source"]["sequence"], update[0].payload["source"]["lsn"]
    snapshot_lsn = min(r.payload["source"]["lsn"] for r in read_topic(f"{config.topic_prefix}.public.t") if r.op == "r")
    # the case this test is for: no previous commit, and a change written before the snapshot's consistent point
    assert sequence.startswith("[null,") and lsn < snapshot_lsn, (sequence, lsn, snapshot_lsn)
    apply_lake(spark, config)
    assert_equal(config, dsn, "t")
