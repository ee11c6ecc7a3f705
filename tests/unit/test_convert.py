"""Value converters on PostgreSQL's text output (DateStyle ISO, TimeZone UTC), against the reference's values."""

from __future__ import annotations

import base64

import pytest

from walflow.records import convert as c
from walflow.records.convert import ConverterSettings, build_converter
from walflow.source.catalog import ColumnType

DEFAULT = ConverterSettings()


def conv(oid: int, text: str, modifier: int = -1, settings: ConverterSettings = DEFAULT, **kw: object):
    converter = build_converter(ColumnType(oid=oid, modifier=modifier, **kw), settings)  # type: ignore[arg-type]
    assert converter is not None
    return converter.schema, converter.convert(text)


def numeric_modifier(precision: int, scale: int) -> int:
    """The typmod PostgreSQL stores for numeric(precision, scale): the scale in 11 bits, negative ones included."""
    return ((precision << 16) | (scale & 0x7FF)) + 4


def test_reference_micro_timestamp() -> None:
    schema, value = conv(c.TIMESTAMP, "2018-06-20 15:13:16.945104")
    assert schema["name"] == "io.debezium.time.MicroTimestamp" and schema["type"] == "int64"
    assert value == 1529507596945104


def test_timestamp_millis_for_low_precision() -> None:
    schema, value = conv(c.TIMESTAMP, "2018-06-20 15:13:16.945", modifier=3)
    assert schema["name"] == "io.debezium.time.Timestamp"
    assert value == 1529507596945


def test_timestamp_before_1970_and_after_2038() -> None:
    assert conv(c.TIMESTAMP, "1969-12-31 23:59:59.999999")[1] == -1
    assert conv(c.TIMESTAMP, "2100-01-01 00:00:00")[1] == 4102444800000000


def test_zoned_timestamp_is_utc_iso() -> None:
    schema, value = conv(c.TIMESTAMPTZ, "2018-06-20 13:13:16.945104+00")
    assert schema["name"] == "io.debezium.time.ZonedTimestamp"
    assert value == "2018-06-20T13:13:16.945104Z"
    # Debezium 3.6 writes as many fraction digits as the column's precision (6 without one)
    assert conv(c.TIMESTAMPTZ, "2018-06-20 15:13:16+02")[1] == "2018-06-20T13:13:16.000000Z"
    assert conv(c.TIMESTAMPTZ, "2018-06-20 15:43:16.5+05:30")[1] == "2018-06-20T10:13:16.500000Z"
    assert conv(c.TIMESTAMPTZ, "2018-06-20 15:43:16.5+05:30", 3)[1] == "2018-06-20T10:13:16.500Z"
    # precision 0: Java's ISO format, which leaves out a zero fraction
    assert conv(c.TIMESTAMPTZ, "2018-06-20 15:43:16+05:30", 0)[1] == "2018-06-20T10:13:16Z"


def test_date_days_and_leap_day() -> None:
    schema, value = conv(c.DATE, "2020-02-29")
    assert schema["name"] == "io.debezium.time.Date" and value == 18321
    assert conv(c.DATE, "1970-01-01")[1] == 0
    assert conv(c.DATE, "1969-12-31")[1] == -1


def test_time_precision() -> None:
    schema, value = conv(c.TIME, "15:13:16.945104")
    assert schema["name"] == "io.debezium.time.MicroTime" and value == 54796945104
    schema, value = conv(c.TIME, "15:13:16.945", modifier=3)
    assert schema["name"] == "io.debezium.time.Time" and value == 54796945


def test_precise_decimal() -> None:
    schema, value = conv(c.NUMERIC, "12.34", modifier=numeric_modifier(10, 2))
    assert schema["name"] == "org.apache.kafka.connect.data.Decimal"
    assert schema["parameters"] == {"scale": "2", "connect.decimal.precision": "10"}
    assert base64.b64decode(value) == (1234).to_bytes(2, "big", signed=True)
    assert base64.b64decode(conv(c.NUMERIC, "-1.00", modifier=numeric_modifier(5, 2))[1]) == b"\x9c"
    assert base64.b64decode(conv(c.NUMERIC, "-1.28", modifier=numeric_modifier(5, 2))[1]) == b"\x80"
    assert base64.b64decode(conv(c.NUMERIC, "1.28", modifier=numeric_modifier(5, 2))[1]) == b"\x00\x80"


def test_negative_scale_decimal() -> None:
    """numeric(5,-2) (PostgreSQL 15+) holds multiples of 100; its typmod's 11-bit two's-complement scale is read
    unsigned, as Debezium 3.6.3 reads it (the differential suite's negative_scale_table): scale 2046, exact value."""
    schema, value = conv(c.NUMERIC, "-1234600", modifier=numeric_modifier(5, -2))
    assert schema["parameters"] == {"scale": "2046", "connect.decimal.precision": "5"}
    unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
    assert unscaled == -1234600 * 10**2046


def test_variable_scale_decimal() -> None:
    schema, value = conv(c.NUMERIC, "3.14159")
    assert schema["name"] == "io.debezium.data.VariableScaleDecimal"
    assert value["scale"] == 5
    assert int.from_bytes(base64.b64decode(value["value"]), "big", signed=True) == 314159


def test_decimal_modes() -> None:
    assert (
        conv(c.NUMERIC, "12.34", numeric_modifier(10, 2), ConverterSettings(decimal_handling_mode="double"))[1] == 12.34
    )
    assert (
        conv(c.NUMERIC, "12.34", numeric_modifier(10, 2), ConverterSettings(decimal_handling_mode="string"))[1]
        == "12.34"
    )


def test_integers_and_floats() -> None:
    assert conv(c.INT2, "-32768") == ({"type": "int16", "optional": True}, -32768)
    assert conv(c.INT8, "9223372036854775807")[1] == 9223372036854775807
    assert conv(c.FLOAT8, "NaN")[1] == "NaN"
    assert conv(c.FLOAT8, "-Infinity")[1] == "-Infinity"
    assert conv(c.FLOAT4, "1.5")[1] == 1.5


def test_bool_json_uuid() -> None:
    assert conv(c.BOOL, "t")[1] is True and conv(c.BOOL, "f")[1] is False
    schema, value = conv(c.JSONB, '{"a": 1}')
    assert schema["name"] == "io.debezium.data.Json" and value == '{"a": 1}'
    assert conv(c.UUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")[0]["name"] == "io.debezium.data.Uuid"


def test_bytea_modes() -> None:
    assert conv(c.BYTEA, "\\x0102ff")[1] == base64.b64encode(b"\x01\x02\xff").decode()
    assert conv(c.BYTEA, "\\x0102ff", settings=ConverterSettings(binary_handling_mode="hex"))[1] == "0102ff"
    assert conv(c.BYTEA, "\\xfbff", settings=ConverterSettings(binary_handling_mode="base64-url-safe"))[1] == "-_8="


def test_unknown_type_is_left_out_or_carried() -> None:
    unknown = ColumnType(oid=99999, base_name="mystery")
    assert build_converter(unknown, DEFAULT) is None
    carried = build_converter(unknown, ConverterSettings(include_unknown_datatypes=True))
    assert carried is not None and carried.schema["type"] == "bytes"


def test_enum_allowed_values() -> None:
    schema, value = conv(99998, "happy", category="E", enum_values=("sad", "happy"))
    assert schema["name"] == "io.debezium.data.Enum" and schema["parameters"] == {"allowed": "sad,happy"}
    assert value == "happy"


@pytest.mark.parametrize("text", ["2018-13-01 00:00:00", "garbage"])
def test_bad_timestamp_raises_value_error(text: str) -> None:
    converter = build_converter(ColumnType(oid=c.TIMESTAMP), DEFAULT)
    assert converter is not None
    with pytest.raises(ValueError):
        converter.convert(text)


@pytest.mark.parametrize(
    "mode,modifier,name",
    [
        ("adaptive", 3, "io.debezium.time.Timestamp"),
        ("adaptive", 0, "io.debezium.time.Timestamp"),
        ("adaptive", -1, "io.debezium.time.MicroTimestamp"),
        ("adaptive_time_microseconds", 2, "io.debezium.time.Timestamp"),
        ("connect", -1, "org.apache.kafka.connect.data.Timestamp"),
        ("connect", 1, "org.apache.kafka.connect.data.Timestamp"),
    ],
)
def test_infinite_timestamps_keep_the_fixed_values_in_every_mode(mode: str, modifier: int, name: str) -> None:
    settings = ConverterSettings(time_precision_mode=mode)
    schema, value = conv(c.TIMESTAMP, "infinity", modifier, settings)
    # the fixed values in microseconds; Debezium 3.6 divides them by 1000 in millisecond fields
    scale = 1 if "Micro" in name else 1000
    assert schema["name"] == name and value == 9223372036825200000 // scale
    assert conv(c.TIMESTAMP, "-infinity", modifier, settings)[1] == -9223372036832400000 // scale
    # an ordinary value is still scaled to the field's unit
    expected = 1529507596945 if "Micro" not in name else 1529507596945000
    assert conv(c.TIMESTAMP, "2018-06-20 15:13:16.945", modifier, settings)[1] == expected


def test_millisecond_timestamps_before_1970_and_bc() -> None:
    assert conv(c.TIMESTAMP, "1969-12-31 23:59:59.9995", 3)[1] == -1
    assert conv(c.TIMESTAMP, "0044-03-15 12:00:00 BC", 3)[1] == conv(c.TIMESTAMP, "0044-03-15 12:00:00 BC")[1] // 1000


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_special_numerics_per_mode(text: str) -> None:
    assert conv(c.NUMERIC, text)[1] is None  # VariableScaleDecimal cannot carry them
    assert conv(c.NUMERIC, text, numeric_modifier(10, 0))[1] is None
    assert conv(c.NUMERIC, text, numeric_modifier(10, 2))[1] is None
    assert conv(c.NUMERIC, text, settings=ConverterSettings(decimal_handling_mode="double"))[1] == text
    names = {"NaN": "NAN", "Infinity": "POSITIVE_INFINITY", "-Infinity": "NEGATIVE_INFINITY"}
    assert conv(c.NUMERIC, text, settings=ConverterSettings(decimal_handling_mode="string"))[1] == names[text]


def _int_array(ndims: int = 1) -> ColumnType:
    return ColumnType(oid=1007, category="A", element=ColumnType(oid=c.INT4), ndims=ndims)


def test_parse_array_nested_and_quoted() -> None:
    assert c.parse_array("{{1,2},{3,NULL}}") == [["1", "2"], ["3", None]]
    assert c.parse_array('{{"a,b","c}"},{"\\"q\\"",NULL}}') == [["a,b", "c}"], ['"q"', None]]
    assert c.parse_array("[0:1][1:2]={{1,2},{3,4}}") == [["1", "2"], ["3", "4"]]
    assert c.parse_array("{{{1},{2}},{{3},{4}}}") == [[["1"], ["2"]], [["3"], ["4"]]]
    with pytest.raises(ValueError):
        c.parse_array("{{1,2},{3,4}")


def test_multi_dimensional_arrays_nest_per_declared_dimension() -> None:
    converter = build_converter(_int_array(2), DEFAULT)
    assert converter is not None
    assert converter.schema == {
        "type": "array",
        "items": {"type": "array", "items": {"type": "int32", "optional": True}, "optional": True},
        "optional": True,
    }
    assert converter.convert("{{1,2},{3,NULL}}") == [[1, 2], [3, None]]
    assert converter.convert("{}") == []
    # PostgreSQL does not enforce declared dimensions: other shapes are reshaped to the schema's depth
    assert converter.convert("{1,2}") == [[1, 2]]
    assert converter.convert("{{{1,2}},{{3,4}}}") == [[1, 2], [3, 4]]


def test_multi_dimensional_value_in_a_one_dimensional_column_does_not_fail(caplog: pytest.LogCaptureFixture) -> None:
    converter = build_converter(_int_array(1), DEFAULT)
    assert converter is not None and converter.schema["items"] == {"type": "int32", "optional": True}
    with caplog.at_level("WARNING"):
        assert converter.convert("{{1,2},{3,4}}") == [1, 2, 3, 4]
        assert converter.convert("{{5,6}}") == [5, 6]
    assert len([r for r in caplog.records if "2 dimension(s)" in r.getMessage()]) == 1
    assert converter.convert("{7,NULL}") == [7, None]


def test_enum_array_items_carry_the_enum_schema() -> None:
    enum = ColumnType(oid=99997, base_name="mood", category="E", enum_values=("sad", "happy"))
    converter = build_converter(ColumnType(oid=99996, category="A", element=enum), DEFAULT)
    assert converter is not None
    assert converter.schema["items"] == {
        "type": "string",
        "optional": False,  # Debezium's enum array items are required
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {"allowed": "sad,happy"},
    }
    assert converter.convert("{happy,NULL}") == ["happy", None]


def test_avro_schema_names_follow_debezium_schema_name_adjuster() -> None:
    from walflow.records.events import avro_name, schema_full_name

    # only the first character of the whole name must be a letter or '_': it is replaced, never prefixed
    assert avro_name("1db.public.t.Value") == "_db.public.t.Value"
    # a digit after a dot is valid in Debezium's full names and stays
    assert schema_full_name("db", "1schema", "2table", "Key") == "db.1schema.2table.Key"
    # other invalid characters become '_'; dots (also inside a table name) stay
    assert schema_full_name("my-server", "public", "order items", "Envelope") == "my_server.public.order_items.Envelope"
    assert schema_full_name("db", "public", "a.b", "Value") == "db.public.a.b.Value"
    assert avro_name("é") == "_"


def test_dates_before_the_common_era_match_postgresql() -> None:
    # expected values from PostgreSQL itself: SELECT '<date>'::date - '1970-01-01'::date
    assert conv(c.DATE, "0001-01-01 BC")[1] == -719528
    assert conv(c.DATE, "0044-03-15 BC")[1] == -735160
    assert conv(c.DATE, "4714-11-24 BC")[1] == -2440588  # Julian day 0, the earliest date PostgreSQL accepts
    assert conv(c.TIMESTAMPTZ, "0044-03-15 12:00:00+00 BC")[1] == "-0043-03-15T12:00:00.000000Z"


@pytest.mark.parametrize(
    "expr,literal,function",
    [
        ("42", "42", False),
        ("'-7'::integer", "-7", False),
        ("'x''y'::character varying", "x'y", False),
        ("'10:15:30.5'::time without time zone", "10:15:30.5", False),
        ("'2018-06-20 15:13:16.945'::timestamp(3) without time zone", "2018-06-20 15:13:16.945", False),
        ("'{1,2}'::integer[]", "{1,2}", False),
        ("'happy'::public.mood", "happy", False),
        ("true", "true", False),
        ("'now()'::text", "now()", False),
        ("nextval('d_id_seq'::regclass)", None, True),
        ("CURRENT_TIMESTAMP(6)", None, True),
        ("make_interval(days => 2)", None, True),
        ("CURRENT_TIMESTAMP", None, False),
        ("CURRENT_DATE", None, False),
        ("(1 + 2)", None, False),
        ("(1 ### 2)", None, False),
        ("NULL::text", None, False),
        ("'a'::text || 'b'::text", None, False),
    ],
)
def test_default_expression_classification(expr: str, literal: str | None, function: bool) -> None:
    """Which catalog defaults are literals (cast on the server as a parameter) and which are function calls."""
    from walflow.source.catalog import is_function_default, literal_default

    assert literal_default(expr) == literal
    assert is_function_default(expr) is function


def test_numerics_beyond_pythons_integer_limit_convert_exactly_and_fast() -> None:
    """Python refuses int() of more than 4,300 digits (and takes quadratic time): the longest numeric PostgreSQL
    accepts converts, exactly, in a fraction of a second, both ways (the lake turns the unscaled value back)."""
    import sys
    import time

    from walflow.records.decimals import EXACT, digits_to_int, int_to_decimal, variable_scale

    whole, fraction = "9" + "1234567890" * 13107 + "7", "3" * 16382 + "1"
    started = time.monotonic()
    value = variable_scale(f"-{whole}.{fraction}")
    back = int_to_decimal(int.from_bytes(base64.b64decode(value["value"]), "big", signed=True)).scaleb(
        -value["scale"], EXACT
    )
    assert time.monotonic() - started < 5
    assert value["scale"] == 16383 and format(back, "f") == f"-{whole}.{fraction}"
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # the reference values only
    try:
        for text in ("0", "-1", "9" * 4301, "-" + "7" * 20_000):
            assert digits_to_int(text) == int(text) and str(int_to_decimal(int(text))) == text
    finally:
        sys.set_int_max_str_digits(limit)


@pytest.mark.parametrize(
    ("digits", "expected"),
    [
        (2, [123411, -25, 5, -123456]),
        (3, [1234110, -250, 50, -1234560]),
        (1, [12341, -3, 1, -12346]),
        (0, [1234, 0, 0, -1235]),
    ],
)
def test_money_takes_the_scale_of_money_fraction_digits_and_rounds_half_up(digits: int, expected: list[int]) -> None:
    """``money.fraction.digits`` sets the decimal's scale; fewer digits than the server prints round half up, as
    Debezium's do (tests/compat's types variants run the same halves through Debezium 3.6.3)."""
    conv = build_converter(
        ColumnType(c.MONEY, name="money", base_name="money"), ConverterSettings(money_fraction_digits=digits)
    )
    assert conv.schema["parameters"] == {"scale": str(digits)}
    values = [conv.convert(text) for text in ("$1,234.11", "-$0.25", "$0.05", "($1,234.56)")]
    assert [int.from_bytes(base64.b64decode(v), "big", signed=True) for v in values] == expected
    assert (
        build_converter(
            ColumnType(c.MONEY, name="money"),
            ConverterSettings(decimal_handling_mode="string", money_fraction_digits=0),
        ).convert("$0.25")
        == "0.25"
    )
