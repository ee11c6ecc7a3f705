"""The transform chain's parts that tests/compat cannot reach cheaply: its configuration errors, the JSON codec's
round trip, Java's replacement syntax, and the values Kafka's transforms refuse (Debezium 3.6.3 proves the rest in
tests/compat's ``transforms`` scenario)."""

from __future__ import annotations

import orjson
import pytest

from walflow.config.connector import parse_config
from walflow.errors import ConfigError, TransformError
from walflow.transforms.chain import TransformChain
from walflow.transforms.javaregex import JavaPattern
from walflow.transforms.record import Codec

BASE = {"name": "c", "topic.prefix": "p", "walflow.lake.enabled": False}
T = "org.apache.kafka.connect.transforms."


def _config(**keys: object):
    return parse_config({**BASE, **{k.replace("__", "."): v for k, v in keys.items()}})


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ({"transforms": "a", "transforms.a.type": "io.debezium.transforms.ContentBasedRouter"}, "runs a script"),
        ({"transforms": "a", "transforms.a.type": "com.example.Mine"}, "walflow runs these transforms"),
        (
            {"transforms": "a", "transforms.a.type": T + "RegexRouter", "transforms.a.regex": "x"},
            "'transforms.a.replacement' is required",
        ),
        (
            {
                "transforms": "a",
                "transforms.a.type": T + "RegexRouter",
                "transforms.a.regex": "(",
                "transforms.a.replacement": "x",
            },
            "not a valid Java regular expression",
        ),
        ({"transforms": "a", "transforms.a.type": T + "Filter", "transforms.a.predicate": "nope"}, "no such predicate"),
        ({"transforms.b.type": T + "Filter"}, "which 'transforms' does not list"),
        (
            {"transforms": "a", "transforms.a.type": T + "InsertField$Value", "transforms.a.offset.field": "o"},
            "sink connectors only",
        ),
        (
            {
                "transforms": "a",
                "transforms.a.type": T + "MaskField$Value",
                "transforms.a.fields": "x",
                "transforms.a.colour": "red",
            },
            "not a property of",
        ),
        (
            {
                "transforms": "a",
                "transforms.a.type": "io.debezium.transforms.ExtractNewRecordState",
                "transforms.a.delete.tombstone.handling.mode": "keep",
            },
            "allowed values are drop, tombstone",
        ),
    ],
)
def test_a_chain_it_cannot_run_is_refused_naming_the_key(keys: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_config({**BASE, **keys})


def test_transforms_turn_the_lake_off_and_are_refused_with_it_on_with_the_way_out() -> None:
    chain = {"name": "c", "topic.prefix": "p", "transforms": "a", "transforms.a.type": T + "Filter"}
    assert parse_config(chain).walflow_lake_enabled is False  # a Debezium configuration, as it is
    assert parse_config({"name": "c", "topic.prefix": "p"}).walflow_lake_enabled is True
    with pytest.raises(ConfigError, match=r"walflow\.lake\.enabled: false"):
        parse_config({**chain, "walflow.lake.enabled": True})


def test_java_replacements() -> None:
    pattern = JavaPattern(r"(?<db>\w+)\.public\.(\w+)", "t")
    assert pattern.replace_first("p.public.t1", "$1.x.$2") == "p.x.t1"
    assert pattern.replace_first("p.public.t1", "${db}-\\$2") == "p-$2"
    assert pattern.replace_first("p.other.t1", "$1") is None
    with pytest.raises(TransformError, match="names group 3"):
        pattern.replace_first("p.public.t", "$3")


def _record(schema: dict, payload: object) -> bytes:
    return orjson.dumps({"schema": schema, "payload": payload})


ROW = {"type": "struct", "fields": [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "5"}, "field": "price"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1, "field": "at"},
], "optional": False, "name": "p.public.t.Value"}  # fmt: skip


def test_the_codec_writes_back_what_it_read_and_leaves_out_schemas_as_the_converter_says() -> None:
    value = _record(ROW, {"id": 1, "price": "AJY=", "at": 5})
    codec = Codec(True, True, True)
    record = codec.decode("p.public.t", None, value, None)
    assert codec.encode(record) == (None, value)
    again = codec.decode("p.public.t", None, value, None)  # from the topic's schema text
    assert again.value_schema is record.value_schema
    assert Codec(False, False, False).encode(record) == (None, orjson.dumps({"id": 1, "price": "AJY=", "at": 5}))


def _apply(config, value: bytes):
    codec = Codec(True, True, True)
    return TransformChain(config.transforms, codec).apply(codec.decode("p.public.t", None, value, None))


def test_mask_field_writes_a_decimal_at_its_scale_and_refuses_another() -> None:
    mask = {"transforms": "m", "transforms.m.type": T + "MaskField$Value", "transforms.m.fields": "price"}
    value = _record(ROW, {"id": 1, "price": "AJY=", "at": 5})
    assert (
        _apply(parse_config({**BASE, **mask, "transforms.m.replacement": "-1.25"}), value).value["price"] == "gw=="
    )  # -125 in one byte, as Java's BigInteger writes it
    with pytest.raises(TransformError, match="scale 2"):
        _apply(parse_config({**BASE, **mask}), value)


def test_timestamp_converter_writes_java_date_formats_in_utc() -> None:
    config = parse_config(
        {
            **BASE,
            "transforms": "t",
            "transforms.t.type": T + "TimestampConverter$Value",
            "transforms.t.field": "at",
            "transforms.t.target.type": "string",
            "transforms.t.format": "yy-M-d h:mm:ss.SSS a 'at' X",
        }
    )
    assert (
        _apply(config, _record(ROW, {"id": 1, "price": None, "at": -1})).value["at"] == "69-12-31 11:59:59.999 PM at Z"
    )
    with pytest.raises(ConfigError, match="letter\\(s\\) E are not"):
        parse_config(
            {
                **BASE,
                "transforms": "t",
                "transforms.t.type": T + "TimestampConverter$Value",
                "transforms.t.field": "at",
                "transforms.t.target.type": "string",
                "transforms.t.format": "EEE yyyy",
            }
        )


def test_the_docs_list_the_transforms_the_model_runs() -> None:
    from pathlib import Path

    from walflow.config.smt_chain import markdown_table

    page = (Path(__file__).resolve().parents[2] / "docs" / "transforms.md").read_text()
    start = page.index("checks it -->\n") + len("checks it -->\n")
    assert page[start : page.index("\n<!-- end of generated table -->")] == markdown_table(), (
        "docs/transforms.md's table differs from walflow.config.smt_chain: paste markdown_table()'s output"
    )
