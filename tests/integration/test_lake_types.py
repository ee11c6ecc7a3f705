"""Every row of the type table, in every mode, streamed and applied to the lake: the lake holds each value as the
docs/lake.md's lake mapping and value representations say (``_walflow_overflow`` for what Spark cannot hold); and
validity ranges with ``infinity`` apply and equal the source.

The expected lake values are computed here from the golden event values of ``test_types.py`` (which are checked
against PostgreSQL there) by the documented mapping, written out independently of the job's converters.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import sys
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from tests.integration.test_types import ALL_CASES, Case, _postgis_available, _prepare, golden_groups, supported
from tests.support import apply_lake, connector, lake_rows, prepare_source, read_topic, stream, unique

pytestmark = [pytest.mark.timeout(900), pytest.mark.spark]

EPOCH = dt.datetime(1970, 1, 1)
MAX_TS = dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
MIN_TS = dt.datetime(1, 1, 1)
UTC = dt.timezone.utc

#: The documented representation of the type table's values that Spark cannot hold: (lake value, exact text kept
#: in _walflow_overflow)
FITTED = {
    "date_bc": (dt.date(1, 1, 1), "-0043-03-15"),
    "date_year_12345": (dt.date(9999, 12, 31), "+12345-06-07"),
    "timestamp_bc": (MIN_TS, "-0043-03-15T12:00:00"),
    "timestamp_year_12345": (MAX_TS, "+12345-06-07T01:02:03.5"),
    "date_inf": (dt.date(9999, 12, 31), "infinity"),
    "date_neginf": (dt.date(1, 1, 1), "-infinity"),
    "timestamp_inf": (MAX_TS, "infinity"),
    "timestamp_neginf": (MIN_TS, "-infinity"),
    "timestamp3_inf": (MAX_TS, "infinity"),
    "timestamp0_neginf": (MIN_TS, "-infinity"),
    "timestamp_connect_inf": (MAX_TS, "infinity"),
    "timestamp_connect_neginf": (MIN_TS, "-infinity"),
    "timestamptz_bc": (MIN_TS.replace(tzinfo=UTC), "-0043-03-15T12:00:00Z"),
}


def _unscaled(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big", signed=True)


def _exact(unscaled: int, scale: int) -> Decimal:
    """unscaled x 10^-scale, exactly, for integers of any length (Python's limit of 4,300 digits lifted for the
    expected value only, so the job under test still runs under it)."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return Decimal(f"{unscaled}E-{scale}")
    finally:
        sys.set_int_max_str_digits(limit)


def expected(schema: dict[str, Any], value: Any) -> Any:
    """The lake value of an event value, by docs/lake.md's lake mapping (in range)."""
    if value is None:
        return None
    name, kind = schema.get("name"), schema["type"]
    if name == "org.apache.kafka.connect.data.Decimal":
        return _exact(_unscaled(value), int(schema["parameters"]["scale"]))
    if name == "io.debezium.data.VariableScaleDecimal":
        return format(_exact(_unscaled(value["value"]), value["scale"]), "f")
    if name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if name in ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"):
        return EPOCH + dt.timedelta(milliseconds=value)
    if name == "io.debezium.time.MicroTimestamp":
        return EPOCH + dt.timedelta(microseconds=value)
    if name == "io.debezium.time.ZonedTimestamp":
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if name in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return value * 1000  # microseconds
    if kind == "bytes":
        return base64.b64decode(value)
    if kind in ("float", "double") and isinstance(value, str):
        return float(value.replace("Infinity", "inf"))
    if kind == "array":
        return [expected(schema["items"], x) for x in value]
    if kind == "map":
        return [(k, v) for k, v in value.items()]
    if kind == "struct":
        return {f["field"]: expected(f, value.get(f["field"])) for f in schema["fields"]}
    return value


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _apply_group(
    spark: Any, dsn: str, cases: list[Case], mode: dict[str, Any], extra_ddl: str = "", extra_values: str = ""
) -> tuple[Any, list[dict[str, Any]], list[Any]]:
    columns = ", ".join(f'"{c.id}" {c.ddl}' for c in cases)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE golden (pk int PRIMARY KEY, {columns}{extra_ddl})")
    config = connector(unique("ltypes"), **mode)
    prepare_source(config, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO golden VALUES (1, {', '.join(c.literal for c in cases)}{extra_values})")
        conn.execute("INSERT INTO golden (pk) VALUES (2)")
    stream(config, dsn)
    records = read_topic(f"{config.topic_prefix}.public.golden")
    assert [r.op for r in records] == ["c", "c"]
    (result,) = apply_lake(spark, config)
    assert result["committed"] and result["records"] == 2
    return config, sorted(lake_rows(config.topic_prefix, "public__golden"), key=lambda r: r["pk"]), records


#: the default modes in make test; each other mode's mappings reach the lake in make test-long (make test compares
#: the events of the connect/string/hex/interval modes with Debezium's, make test-long those of the others)
@pytest.mark.parametrize(
    "label,mode,cases",
    [g if g[0] == "defaults" else pytest.param(*g, marks=pytest.mark.long) for g in golden_groups(ALL_CASES)],
    ids=[g[0] for g in golden_groups(ALL_CASES)],
)
def test_every_type_row_reaches_the_lake(
    spark: Any, database: str, label: str, mode: dict[str, Any], cases: list[Case]
) -> None:
    """Each case's value (and the row of NULLs/defaults) in the lake, by the documented mapping and representation."""
    cases = supported(cases)
    _prepare(database, cases)
    _config, rows, records = _apply_group(spark, database, cases, mode)
    failures = []
    for row, record in zip(rows, records):
        fields = {f["field"]: f for f in record.value["schema"]["fields"][1]["fields"]}
        overflow = dict(row["_walflow_overflow"] or [])
        for case in cases:
            value = record.payload["after"].get(case.id)
            want, text = (
                FITTED[case.id]
                if case.id in FITTED and value is not None and row["pk"] == 1
                else (expected(fields[case.id], value), None)
            )
            if not same(row[case.id], want):
                failures.append(
                    f"pk={row['pk']} {case.id}: lake {row[case.id]!r} != expected {want!r} (event value {value!r})"
                )
            if overflow.get(case.id) != text:
                failures.append(
                    f"pk={row['pk']} {case.id}: _walflow_overflow has {overflow.get(case.id)!r}, expected {text!r}"
                )
        unexpected = set(overflow) - {c.id for c in cases if c.id in FITTED}
        if unexpected:
            failures.append(f"pk={row['pk']}: unexpected _walflow_overflow entries {unexpected}")
    assert not failures, "\n".join(failures)


def test_huge_arrays_precise_numerics_and_geometry_reach_the_lake(spark: Any, database: str) -> None:
    """Arrays of 100,000 elements, numerics beyond Spark's 38 digits (exact text), and PostGIS geometry and
    geography (when the extension can be had), and a negative-scale numeric, in one row."""
    gis = _postgis_available()
    with psycopg.connect(database, autocommit=True) as conn:
        if gis:
            conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
    cases = [
        Case("big_ints", "integer[]", "(SELECT array_agg(g) FROM generate_series(1, 100000) g)", {}, None),
        # together under librdkafka's default message.max.bytes (1 MB), the largest record the stream can send
        Case("big_texts", "text[]", "(SELECT array_agg(md5(g::text)) FROM generate_series(1, 5000) g)", {}, None),
        Case("wide", "numeric(50,5)", "'123456789012345678901234567890123456789012.34567'", {}, None),
        Case("wider", "numeric(60,45)", "'1.000000000000000000000000000000000000000000001'", {}, None),
        Case(
            "uint256",
            "numeric(78,0)",
            "'115792089237316195423570985008687907853269984665640564039457584007913129639935'",
            {},
            None,
        ),
        Case("hundreds", "numeric(5,-2)", "'1234567'", {}, None),  # PostgreSQL 15+ rounds it to 1234600
    ]
    if gis:
        cases += [
            Case("geom", "geometry", "ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0)', 3187)", {}, None),
            Case("geog", "geography(Point, 4326)", "ST_GeogFromText('SRID=4326;POINT(3 4)')", {}, None),
        ]
    _config, rows, _records = _apply_group(spark, database, cases, {})
    row = rows[0]
    assert row["big_ints"] == list(range(1, 100_001)) and len(row["big_texts"]) == 5_000
    assert row["wide"] == "123456789012345678901234567890123456789012.34567"
    assert row["wider"] == "1.000000000000000000000000000000000000000000001"
    assert row["uint256"] == "115792089237316195423570985008687907853269984665640564039457584007913129639935"
    assert row["hundreds"] == Decimal("1234600")
    assert row["_walflow_overflow"] is None
    if gis:
        with psycopg.connect(database) as conn:
            # the EWKB, SRID included, as Debezium 3.6 sends it
            wkb, srid = conn.execute("SELECT ST_AsEWKB(geom, 'NDR'), ST_SRID(geom) FROM golden WHERE pk = 1").fetchone()
        assert row["geom"] == {"wkb": bytes(wkb), "srid": srid}
        assert row["geog"]["srid"] == 4326 and row["geog"]["wkb"][:1] == b"\x01"
    assert all(rows[1][c.id] is None for c in cases)


@pytest.mark.long
def test_validity_ranges_with_infinity_apply_and_equal_the_source(spark: Any, database: str) -> None:
    """A table of validity ranges (``infinity`` ends, a key holding ``infinity``), streamed and applied, then changed:
    the lake equals the source, with ``infinity``/``-infinity`` and years Spark cannot hold at the ends of its
    range and their exact text in ``_walflow_overflow``; ``infinity`` and 9999-12-31 23:59:59.999999 stay two keys."""
    dsn = database
    config = connector(unique("inf"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE prices (item int, valid_to timestamp, valid_from date, at timestamptz, price numeric(8,2),"
            " PRIMARY KEY (item, valid_to))"
        )
    prepare_source(config, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO prices VALUES (1, 'infinity', '-infinity', 'infinity', 10), (1, '9999-12-31 23:59:59.999999',"
            " '2020-01-01', now(), 20), (2, '2024-01-01', 'infinity', '-infinity', 30), (3, '0044-03-15 12:00:00 BC',"
            " '12345-06-07', '2024-05-01 10:00+02', 40)"
        )
    stream(config, dsn)
    apply_lake(spark, config)
    assert_prices_equal(config.topic_prefix, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE prices SET price = 11 WHERE item = 1 AND valid_to = 'infinity'")
        conn.execute(
            "UPDATE prices SET valid_from = '2021-01-01', at = 'infinity' WHERE item = 2"
        )  # one value back in range
        conn.execute("UPDATE prices SET valid_to = 'infinity' WHERE item = 3")  # the key itself changes
    stream(config, dsn)
    apply_lake(spark, config)
    assert_prices_equal(config.topic_prefix, dsn)


def _representation(finite_value: Any, text: str, low: Any, high: Any) -> tuple[Any, str | None]:
    """The documented lake form of a PostgreSQL value given its text and, when Python can hold it, its value."""
    if finite_value is not None:
        return finite_value, None
    exact = {"infinity": "infinity", "-infinity": "-infinity"}.get(text)
    if exact is None:  # a year Python (and Spark) cannot hold: BC or after 9999
        exact = text
    return (low if text.startswith("-") or text.endswith(" BC") else high), exact


def assert_prices_equal(namespace: str, dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        source = conn.execute(
            "SELECT item, valid_to::text, valid_from::text, at::text, price, "
            "CASE WHEN isfinite(valid_to) AND valid_to BETWEEN '0001-01-01' AND '9999-12-31 23:59:59.999999' THEN"
            " valid_to END, CASE WHEN isfinite(valid_from) AND valid_from BETWEEN '0001-01-01' AND '9999-12-31' THEN"
            " valid_from END, CASE WHEN isfinite(at) AND at BETWEEN '0001-01-01 00:00+00'"
            " AND '9999-12-31 23:59:59.999999+00' THEN at END FROM prices"
        ).fetchall()
    lake = lake_rows(namespace, "public__prices")
    assert len(lake) == len(source)
    by_key = {(r["item"], r["valid_to"], "valid_to" in dict(r["_walflow_overflow"] or [])): r for r in lake}
    assert len(by_key) == len(lake)
    for item, to_text, from_text, at_text, price, to_value, from_value, at_value in source:
        to_want = _representation(to_value, to_text, MIN_TS, MAX_TS)
        row = by_key.get((item, to_want[0], to_want[1] is not None))
        assert row is not None, (
            f"no lake row for item {item} valid_to {to_text}: {[(r['item'], r['valid_to']) for r in lake]}"
        )
        overflow = dict(row["_walflow_overflow"] or [])
        from_want = _representation(from_value, from_text, dt.date(1, 1, 1), dt.date(9999, 12, 31))
        at_want = _representation(at_value, at_text, MIN_TS.replace(tzinfo=UTC), MAX_TS.replace(tzinfo=UTC))
        assert row["price"] == price
        assert (row["valid_from"], overflow.get("valid_from") is not None) == (from_want[0], from_want[1] is not None)
        assert (row["at"], overflow.get("at") is not None) == (at_want[0], at_want[1] is not None)
        for column, text in (("valid_to", to_text), ("valid_from", from_text), ("at", at_text)):
            if text in ("infinity", "-infinity"):
                assert overflow[column] == text
    texts = {(r["item"], k): v for r in lake for k, v in (r["_walflow_overflow"] or [])}
    assert texts.get((3, "valid_from")) == "+12345-06-07"
