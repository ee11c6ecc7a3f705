"""Value converters on PostgreSQL's text output (DateStyle ISO, TimeZone UTC), against the reference's values."""

from __future__ import annotations

import base64

import pytest

from walflow import convert as c
from walflow.convert import ColumnType, ConverterSettings, build_converter

DEFAULT = ConverterSettings()


def conv(oid: int, text: str, modifier: int = -1, settings: ConverterSettings = DEFAULT, **kw: object):
    converter = build_converter(ColumnType(oid=oid, modifier=modifier, **kw), settings)  # type: ignore[arg-type]
    assert converter is not None
    return converter.schema, converter.convert(text)


def numeric_modifier(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


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
    assert conv(c.TIMESTAMPTZ, "2018-06-20 15:13:16+02")[1] == "2018-06-20T13:13:16Z"
    assert conv(c.TIMESTAMPTZ, "2018-06-20 15:43:16.5+05:30")[1] == "2018-06-20T10:13:16.5Z"


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


def test_variable_scale_decimal() -> None:
    schema, value = conv(c.NUMERIC, "3.14159")
    assert schema["name"] == "io.debezium.data.VariableScaleDecimal"
    assert value["scale"] == 5
    assert int.from_bytes(base64.b64decode(value["value"]), "big", signed=True) == 314159


def test_decimal_modes() -> None:
    assert conv(c.NUMERIC, "12.34", numeric_modifier(10, 2), ConverterSettings(decimal_handling_mode="double"))[1] == 12.34
    assert conv(c.NUMERIC, "12.34", numeric_modifier(10, 2), ConverterSettings(decimal_handling_mode="string"))[1] == "12.34"


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
