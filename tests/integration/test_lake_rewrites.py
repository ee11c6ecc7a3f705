"""Issue 45: rows that change without change events reach the lake. A table rewrite (a type change with USING, a
column computed per row), a table dropped and created again or swapped in by a rename, an enum value renamed, changes
made while a table was renamed away, and a column dropped and added again under its name: walflow re-reads the table
itself (an incremental snapshot, in the batch's summary) and the lake then removes what it held from before (the
sweep), so the lake equals the source. Real PostgreSQL, broker, Spark and Iceberg; each test compares every row of
the lake with the source (tests.lakecheck), after the stream and the lake caught up as the stream DAG would."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.lakecheck import differences
from tests.privileges import hand_over
from tests.support import apply_lake, connector, setup, stream, unique
from walflow.errors import LakeSchemaError
from walflow.lake.naming import table_name

#: in make test's unit lane, which starts a Spark session of its own for these and tests/integration/test_lake_toast.py
pytestmark = [pytest.mark.timeout(900), pytest.mark.spark, pytest.mark.rereads]


def run(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def catch_up(spark: Any, config: Any, dsn: str, **overrides: Any) -> list[str]:
    """Stream until the slot is drained and no re-read runs, then apply the lake until nothing waits (what successive
    stream DAG runs do); returns the tables the batches re-read."""
    reread: list[str] = []
    for _ in range(20):
        summary = stream(config, dsn)
        reread += [r["table"] for r in summary.rereads]
        if not summary.events and not summary.rereads and not summary.snapshot_rows:
            break
    for _ in range(20):
        results = apply_lake(spark, config, **overrides)
        if not any(r.get("backlog") for r in results):
            break
    return reread


def assert_equal(config: Any, dsn: str, *tables: str) -> None:
    found = [d for t in tables for d in differences(dsn, config.topic_prefix, table_name("public", t), "public", t)]
    assert not found, "\n".join(found)


@pytest.mark.long
def test_table_rewrites_are_re_read(spark: Any, database: str) -> None:
    """PostgreSQL rewrites every row for a type change with USING (values, and here the key too), a timestamp's
    precision cut, and a column added with a value computed per row (an identity, a volatile default, a domain with a
    default and a CHECK); decoding carries none of it. Each table is re-read once, rows whose key the rewrite changed
    are gone from the lake, and a table no rewrite touched is not re-read, though VACUUM FULL gave it new storage."""
    dsn = database
    config = connector(unique("rewrite"))
    run(
        dsn,
        "CREATE DOMAIN positive_qty AS int DEFAULT 3 CHECK (VALUE > 0)",
        "CREATE TABLE t_int (id int PRIMARY KEY, qty int, name varchar(20), ts timestamptz)",
        "CREATE TABLE t_key (id int PRIMARY KEY, v text)",
        "CREATE TABLE t_calm (id int PRIMARY KEY, v text)",
        "INSERT INTO t_int SELECT g, g * 10, 'n' || g, '2024-01-02 07:08:09.987654+00' FROM generate_series(1, 6) g",
        "INSERT INTO t_key SELECT g, 'v' || g FROM generate_series(1, 5) g",
        "INSERT INTO t_calm SELECT g, 'c' FROM generate_series(1, 3) g",
    )
    setup(config, dsn)
    catch_up(spark, config, dsn)
    run(
        dsn,
        "UPDATE t_int SET qty = qty + 1 WHERE id = 1",  # streamed before the rewrite
        "ALTER TABLE t_int ALTER COLUMN qty TYPE bigint USING qty * 100",
        "ALTER TABLE t_int ALTER COLUMN name TYPE text USING upper(name)",
        "ALTER TABLE t_int ALTER COLUMN ts TYPE timestamptz(0)",
        "ALTER TABLE t_int ADD COLUMN x1 int GENERATED ALWAYS AS IDENTITY",
        "ALTER TABLE t_int ADD COLUMN at timestamptz DEFAULT clock_timestamp(),"
        " ADD COLUMN tag uuid DEFAULT gen_random_uuid()",
        "ALTER TABLE t_int ADD COLUMN q positive_qty",
        "ALTER TABLE t_key ALTER COLUMN id TYPE bigint USING id * 1000",  # every key changes: the old keys must go
        "VACUUM FULL t_calm",  # new storage, no new values: not re-read
        "UPDATE t_calm SET v = 'd' WHERE id = 1",
    )
    reread = catch_up(spark, config, dsn)
    assert sorted(reread) == ["public.t_int", "public.t_key"], reread
    assert_equal(config, dsn, "t_int", "t_key", "t_calm")


@pytest.mark.long
def test_keyless_tables_given_a_key_are_re_read_and_one_rewritten_stops_its_topic_until_then(
    spark: Any, database: str
) -> None:
    """``ALTER TABLE t_keyless ADD COLUMN id bigserial PRIMARY KEY``: every row gets its id in a rewrite, and the lake's
    rows from before (applied as rows of a table without key) held none, and were duplicated beside the re-read ones:
    the table is re-read by its new key and the rows from before are swept. A table without key whose rows a rewrite
    changed cannot be re-read by key: its topic stops with the cause and the fix (the other topics are applied), until
    the table gets a key: then it is re-read and the lake follows."""
    dsn = database
    config = connector(unique("keyless"))
    run(
        dsn,
        "CREATE TABLE t_keyless (x int, y text)",
        "ALTER TABLE t_keyless REPLICA IDENTITY FULL",
        "CREATE TABLE kl (x int, y text)",
        "ALTER TABLE kl REPLICA IDENTITY FULL",
        "INSERT INTO t_keyless VALUES (1, 'a'), (1, 'a'), (2, 'b')",
        "INSERT INTO kl VALUES (1, 'a'), (2, 'b')",
    )
    setup(config, dsn)
    catch_up(spark, config, dsn)
    run(
        dsn,
        "INSERT INTO t_keyless VALUES (3, 'c')",
        "ALTER TABLE t_keyless ADD COLUMN id bigserial PRIMARY KEY",
        "UPDATE t_keyless SET y = 'B' WHERE x = 2",
        "ALTER TABLE kl ALTER COLUMN x TYPE bigint USING x * 10",
        "INSERT INTO kl VALUES (3, 'c')",
    )
    with pytest.raises(LakeSchemaError) as refused:
        catch_up(spark, config, dsn)
    message = str(refused.value)
    assert "public.kl" in message and "no primary key" in message and "walflow reset" in message, message
    for _ in range(
        4
    ):  # the other topic goes on: t_keyless's records hold two keys (none, then id), applied in two runs
        with pytest.raises(LakeSchemaError) as again:
            apply_lake(spark, config)
        if not any(r.get("backlog") for r in again.value.results):  # type: ignore[attr-defined]
            break
    assert_equal(config, dsn, "t_keyless")
    run(dsn, "ALTER TABLE kl ADD PRIMARY KEY (x)")
    assert catch_up(spark, config, dsn) == ["public.kl"]
    assert_equal(config, dsn, "kl", "t_keyless")


@pytest.mark.parametrize("mode", ["all_tables", pytest.param("filtered", marks=pytest.mark.long)])
def test_a_table_dropped_and_created_again_is_a_new_table(spark: Any, database: str, mode: str) -> None:
    """A table dropped and created again under its name, with inserts in the same transaction (a full refresh): the
    lake drops the old table's rows and takes the new one's, also those a ``filtered`` publication never decoded
    (the new table was not in it yet); later changes apply. Then a table swapped in by renames (the usual online
    migration): the lake holds the new table's rows, not the old ones'."""
    dsn = database
    filtered = mode == "filtered"
    config = connector(
        unique(f"recreate{mode[0]}"), **{"publication.autocreate.mode": mode, "table.include.list": r"public\.t_int"}
    )

    def handed_over() -> None:
        if filtered:
            hand_over(dsn, "public.t_int")  # a 'filtered' publication takes only tables the connector's group owns

    run(
        dsn,
        "CREATE TABLE t_int (id int PRIMARY KEY, qty int)",
        "INSERT INTO t_int SELECT g, g FROM generate_series(1, 6) g",
    )
    handed_over()
    setup(config, dsn)
    catch_up(spark, config, dsn)
    run(
        dsn,
        "BEGIN",
        "DROP TABLE t_int",
        "CREATE TABLE t_int (id int PRIMARY KEY, qty int)",
        "INSERT INTO t_int SELECT g, g * 7 FROM generate_series(4, 9) g",
        "COMMIT",
    )
    handed_over()
    run(dsn, "UPDATE t_int SET qty = 0 WHERE id = 9")
    assert catch_up(spark, config, dsn) == ["public.t_int"]
    assert_equal(config, dsn, "t_int")
    run(dsn, "UPDATE t_int SET qty = -1 WHERE id = 4")
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, "t_int")
    run(
        dsn,
        "CREATE TABLE t_int_new (LIKE t_int INCLUDING ALL)",
        "INSERT INTO t_int_new SELECT id + 100, qty FROM t_int",
        "BEGIN",
        "ALTER TABLE t_int RENAME TO t_int_old",
        "ALTER TABLE t_int_new RENAME TO t_int",
        "COMMIT",
    )
    handed_over()
    assert catch_up(spark, config, dsn) == ["public.t_int"]
    assert_equal(config, dsn, "t_int")


@pytest.mark.long
def test_enum_values_renamed_and_tables_renamed_are_re_read(spark: Any, database: str) -> None:
    """``ALTER TYPE lt_mood RENAME VALUE 'sad' TO 'unhappy'`` changes what every row holding it says without touching a
    row: the tables using the type (directly, as an array, through a domain) are re-read, and a table that does not use
    it is not. ``ALTER TABLE t RENAME TO t_maint``, an update through the new name and the rename back, in one
    transaction: the update is streamed under the other name (into its own topic, as Debezium does), and t is re-read.
    ``ALTER TABLE r RENAME TO r2``: r2's topic and lake table start with the changes streamed under the new name, so r2
    is re-read; and again when it gets its old name back after changes streamed under the new one.
    ``ALTER TABLE t RENAME TO t_away`` (a name the filters leave out) and an update there,
    then in a later batch the rename back: t is re-read."""
    dsn = database
    config = connector(unique("renames"), **{"table.exclude.list": r"public\.t_away"})
    run(
        dsn,
        "CREATE TYPE lt_mood AS ENUM ('sad', 'ok')",
        "CREATE DOMAIN lt_moody AS lt_mood",
        "CREATE TABLE m (id int PRIMARY KEY, mood lt_mood, moods lt_mood[])",
        "CREATE TABLE d (id int PRIMARY KEY, mood lt_moody)",
        "CREATE TABLE t (id int PRIMARY KEY, qty int)",
        "CREATE TABLE r (id int PRIMARY KEY, v text)",
        "INSERT INTO m VALUES (1, 'sad', '{sad,ok}'), (2, 'ok', '{ok}')",
        "INSERT INTO d VALUES (1, 'sad')",
        "INSERT INTO t SELECT g, g FROM generate_series(1, 4) g",
        "INSERT INTO r SELECT g, 'v' || g FROM generate_series(1, 5) g",
    )
    setup(config, dsn)
    catch_up(spark, config, dsn)
    run(
        dsn,
        "ALTER TYPE lt_mood RENAME VALUE 'sad' TO 'unhappy'",
        "ALTER TYPE lt_mood ADD VALUE 'glad'",
        "BEGIN; ALTER TABLE t RENAME TO t_maint; UPDATE t_maint SET qty = 100 WHERE id = 2;"
        " ALTER TABLE t_maint RENAME TO t; COMMIT",
        "UPDATE r SET v = 'before' WHERE id = 1",
        "ALTER TABLE r RENAME TO r2",
        "UPDATE r2 SET v = 'after' WHERE id = 2",
    )
    assert sorted(catch_up(spark, config, dsn)) == ["public.d", "public.m", "public.r2", "public.t"]
    assert_equal(config, dsn, "m", "d", "t", "r2")
    run(
        dsn,
        "UPDATE r2 SET v = 'while r2' WHERE id = 3",
        "ALTER TABLE t RENAME TO t_away",
        "UPDATE t_away SET qty = 7 WHERE id = 3",
    )
    assert catch_up(spark, config, dsn) == []
    run(dsn, "ALTER TABLE r2 RENAME TO r", "ALTER TABLE t_away RENAME TO t")
    assert catch_up(spark, config, dsn) == ["public.r", "public.t"]
    assert_equal(config, dsn, "r", "t")


@pytest.mark.parametrize(
    "form",
    ["one-statement", *(pytest.param(f, marks=pytest.mark.long) for f in ("one-transaction", "two-transactions"))],
)
def test_a_column_dropped_and_added_again_within_one_batch(spark: Any, database: str, form: str) -> None:
    """``ALTER TABLE t_int DROP COLUMN x1, ADD COLUMN x1 int DEFAULT 0`` (or the two in one transaction, or in two),
    between changes of the table that reach the stream in one batch: the events before and after it name the same
    column with the same type, so no event tells the old attribute from the new one, and the rows that kept the old
    column's value in the lake (7 where the source has 0) are re-read."""
    dsn = database
    config = connector(unique("readd"))
    run(
        dsn,
        "CREATE TABLE t_int (id int PRIMARY KEY, n int, x1 int)",
        "INSERT INTO t_int SELECT g, g, 7 FROM generate_series(1, 4) g",
    )
    setup(config, dsn)
    catch_up(spark, config, dsn)
    drop_add = {
        "one-statement": ["ALTER TABLE t_int DROP COLUMN x1, ADD COLUMN x1 int DEFAULT 0"],
        "one-transaction": [
            "BEGIN",
            "ALTER TABLE t_int DROP COLUMN x1",
            "ALTER TABLE t_int ADD COLUMN x1 int DEFAULT 9",
            "COMMIT",
        ],
        "two-transactions": ["ALTER TABLE t_int DROP COLUMN x1", "ALTER TABLE t_int ADD COLUMN x1 int DEFAULT 9"],
    }[form]
    run(dsn, "UPDATE t_int SET n = 5 WHERE id = 2", *drop_add, "UPDATE t_int SET n = 10 WHERE id = 1")
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, "t_int")


@pytest.mark.parametrize("form", ["new-column", "same-name"])
def test_attributes_of_a_table_dropped_and_created_again_are_not_the_former_tables(
    spark: Any, database: str, form: str
) -> None:
    """A table dropped and created again numbers its attributes anew, so the former table's attribute 4 (here a
    column added with ``DEFAULT true``, or ``v`` re-added as jsonb with a default) is not the new table's: a column
    the new table gets at attribute 4 (added without a default and given one after, or ``v`` re-added as boolean)
    holds NULL in the rows older than it, and the events of those rows streamed in the same lake run must not take
    the former attribute's fill (the torture's seed 3 found both: a lake row with ``true`` where the source has NULL,
    and a refusal of ``{"d": 1}`` as a boolean)."""
    dsn = database
    config = connector(unique("again"))
    run(
        dsn,
        "CREATE TABLE t (id int PRIMARY KEY, v text, n int)",
        "INSERT INTO t SELECT g, 'v' || g, g FROM generate_series(1, 10) g",
    )
    setup(config, dsn)
    catch_up(spark, config, dsn)
    former = {
        "new-column": "ALTER TABLE t ADD COLUMN c1 boolean DEFAULT true",
        "same-name": """ALTER TABLE t DROP COLUMN v, ADD COLUMN v jsonb DEFAULT '{"d": 1}'""",
    }[form]
    run(dsn, former, "INSERT INTO t (id, n) VALUES (11, 11)")
    assert catch_up(spark, config, dsn) == (["public.t"] if form == "same-name" else [])
    assert_equal(config, dsn, "t")
    run(
        dsn,
        "BEGIN",
        "DROP TABLE t",
        "CREATE TABLE t (id int PRIMARY KEY, v text, n int)",
        "INSERT INTO t SELECT g, 'w' || g, g FROM generate_series(1, 8) g",
        "COMMIT",
    )
    assert catch_up(spark, config, dsn) == ["public.t"]
    assert_equal(config, dsn, "t")
    now = {
        "new-column": [
            "ALTER TABLE t ADD COLUMN c2 boolean",
            "ALTER TABLE t ALTER COLUMN c2 SET DEFAULT true",
            "INSERT INTO t (id, v, n, c2) VALUES (20, 'y', 20, true)",
        ],
        "same-name": [
            "ALTER TABLE t DROP COLUMN v, ADD COLUMN v boolean",
            "INSERT INTO t (id, n, v) VALUES (20, 20, true)",
        ],
    }[form]
    # rows 1 to 3 change before the new attribute, in the same lake run
    run(dsn, "UPDATE t SET n = n + 100 WHERE id <= 3", *now)
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, "t")
