"""Issue 45: unchanged TOASTed values reach the lake whatever their type and whatever the lake's runs cut. Debezium
sends a value an update left unchanged and stored out of line as a placeholder of its type's form, and a primary-key
change as a delete and a create whose placeholders only the old key's row can fill. Real PostgreSQL, broker, Spark and
Iceberg; each test compares every row of the lake with the source (tests.lakecheck)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.integration.test_lake_truth import BIG, assert_equal, catch_up, run
from tests.support import apply_lake, connector, setup, stream, unique

#: in make test's unit lane, which starts a Spark session of its own for these and
#: tests/integration/test_lake_rewrites.py
pytestmark = [pytest.mark.timeout(900), pytest.mark.spark, pytest.mark.rereads]


#: a TOASTable column of each kind whose unchanged value Debezium's events carry as a placeholder of its own form (the
#: text, its bytes in base64, one text or UUID element, the bytes as numbers, a one-entry map), each with values too
#: large and too random to stay inline
TOASTED = {
    "ints": ("int[]", "(SELECT array_agg((g * 7919 + i * 104729) % 1000003) FROM generate_series(1, 600) i)"),
    "longs": (
        "bigint[]",
        "(SELECT array_agg(((g * 7919 + i * 104729) % 1000003)::bigint * 100003) FROM generate_series(1, 600) i)",
    ),
    "days": (
        "date[]",
        "(SELECT array_agg(DATE '2000-01-01' + (g * 7919 + i * 104729) % 10000) FROM generate_series(1, 600) i)",
    ),
    "ids": ("uuid[]", "(SELECT array_agg(md5(g::text || i::text)::uuid) FROM generate_series(1, 300) i)"),
    "words": ("text[]", "(SELECT array_agg(md5(g::text || i::text)) FROM generate_series(1, 300) i)"),
    "labels": ("toasted_words", "(SELECT array_agg(md5(i::text || g::text)) FROM generate_series(1, 300) i)"),
    "doc": ("jsonb", "(SELECT jsonb_agg(md5(g::text || i::text)) FROM generate_series(1, 300) i)"),
    "blob": ("bytea", "(SELECT string_agg(md5(g::text || i::text), '')::bytea FROM generate_series(1, 300) i)"),
    "body": ("text", "(SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 300) i)"),
    "attrs": (
        "hstore",
        "(SELECT hstore(array_agg(md5(i::text)), array_agg(md5(g::text || i::text))) FROM generate_series(1, 200) i)",
    ),
    # arrays whose unchanged TOASTed value Debezium writes as null: the stream names them in a header for the lake
    "reals": (
        "float8[]",
        "(SELECT array_agg(((g * 7919 + i * 104729) % 1000003)::float8 / 7) FROM generate_series(1, 600) i)",
    ),
    "amounts": (
        "numeric[]",
        "(SELECT array_agg(((g * 7919 + i * 104729) % 1000003)::numeric / 7) FROM generate_series(1, 300) i)",
    ),
    "flags": ("boolean[]", "(SELECT array_agg(md5(g::text || i::text) < '8') FROM generate_series(1, 6000) i)"),
    "shorts": ("int2[]", "(SELECT array_agg(((g * 7919 + i * 104729) % 30011)::int2) FROM generate_series(1, 1200) i)"),
    "stamps": (
        "timestamptz[]",
        (
            "(SELECT array_agg(timestamptz '2020-01-01 00:00:00+00' + ((g * 7919 + i * 104729) % 1000003)"
            " * interval '1 s') FROM generate_series(1, 400) i)"
        ),
    ),
}


#: the kinds spread over three tables of five (one table of fifteen TOASTed columns costs Spark far more than three of
#: five: each column the run resolves adds windows to one plan)
TABLES = {f"tt{i}": list(TOASTED)[5 * i : 5 * i + 5] for i in range(3)}


def _toasted_tables(dsn: str) -> None:
    run(dsn, "CREATE EXTENSION IF NOT EXISTS hstore", "CREATE DOMAIN toasted_words AS text[]")
    for table, kinds in TABLES.items():
        run(
            dsn,
            f"CREATE TABLE {table} (id int PRIMARY KEY, small text,"
            f" {', '.join(f'{c} {TOASTED[c][0]}' for c in kinds)})",
            f"INSERT INTO {table} SELECT g, 'a', {', '.join(TOASTED[c][1] for c in kinds)}"
            " FROM generate_series(1, 4) g",
        )


@pytest.mark.long
def test_unchanged_toasted_values_of_every_kind_stay_in_the_lake(spark: Any, database: str) -> None:
    """Issue 45: an update that leaves TOASTed values unchanged (REPLICA IDENTITY DEFAULT) sends a placeholder in the
    form Debezium gives each type: ``int4[]``, ``int8[]`` and ``date[]`` as the placeholder's bytes as numbers, which
    the lake took for values (``{95, 95, 100, ...}``), ``uuid[]`` as a UUID made from those bytes, ``hstore`` as a
    one-entry map (and as a JSON object: the next test). Arrays of other element types get a null, which the lake would
    take for a real one: the stream names them in a header of the event (``__walflow.unavailable``, with the lake on).
    Every one keeps its value after a plain update, and the arrays of numbers, UUIDs and text also after key changes
    rotating three rows in one transaction (each new key takes the value of the row it came from)."""
    dsn = database
    config = connector(unique("toasted"), **{"hstore.handling.mode": "map"})
    _toasted_tables(dsn)
    setup(config, dsn)
    catch_up(spark, config, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        for table in TABLES:
            conn.execute(f"UPDATE {table} SET small = 'b' WHERE id = 1")  # type: ignore[arg-type]
        for table in ("tt0",):  # the forms of arrays: numbers, UUIDs, text elements (the cut test below rotates more)
            for change in ("id = 156 WHERE id = 2", "id = 2 WHERE id = 3", "id = 3 WHERE id = 156"):
                conn.execute(f"UPDATE {table} SET {change}")  # type: ignore[arg-type]
    catch_up(spark, config, dsn)
    assert_equal(config, dsn, *TABLES)


@pytest.mark.long
def test_a_key_change_with_toasted_values_applied_by_runs_cut_anywhere(spark: Any, database: str) -> None:
    """Issue 45: a primary-key change is a delete of the old key and a create of the new one, whose unchanged TOASTed
    values are placeholders only the old key's row can fill. With ``walflow.lake.max.records`` below the batch, one
    run applied the delete and the next the create, which found nothing to take the value from (NULL under the new
    key). On a composite key over three partitions, key changes and rotations applied by runs of one, two and three
    records (fewer than the partitions at first, so a run reads none of a partition), then the rest: a run never
    applies a key change by halves, and the lake equals the source. An hstore as a JSON object and a bytea in base64
    (whose placeholder is a null) are among the TOASTed values (the previous test has the other forms)."""
    dsn = database
    config = connector(
        unique("cutkey"),
        **{"topic.creation.default.partitions": 3, "hstore.handling.mode": "json", "binary.handling.mode": "base64"},
    )
    run(
        dsn,
        "CREATE EXTENSION IF NOT EXISTS hstore",
        "CREATE TABLE kc (a text, b int, small text, payload text, tags int[], attrs hstore, blob bytea,"
        " PRIMARY KEY (a, b))",
        f"INSERT INTO kc SELECT 'k', g, 's', {BIG.format(salt='g')}, {TOASTED['ints'][1]}, {TOASTED['attrs'][1]},"
        f" {TOASTED['blob'][1]} "
        "FROM generate_series(1, 7) g",
    )
    setup(config, dsn)
    catch_up(spark, config, dsn)
    run(
        dsn,
        "UPDATE kc SET b = b + 100 WHERE b = 1",
        "UPDATE kc SET small = 't' WHERE b = 4",
        "BEGIN",
        "UPDATE kc SET b = 156 WHERE b = 2",
        "UPDATE kc SET b = 2 WHERE b = 3",
        "UPDATE kc SET b = 3 WHERE b = 156",
        "COMMIT",
        "UPDATE kc SET b = b + 1000, small = 'u' WHERE b > 5",
    )
    stream(config, dsn)
    for records in (1, 2, 3):
        apply_lake(spark, config, max_records=records)
    apply_lake(spark, config)  # the rest (the torture run cuts runs anywhere, many times)
    assert_equal(config, dsn, "kc")
