"""The outbox router's payload expansion (walflow.transforms.json_payload): the schema Debezium's JsonSchemaData
infers, and what stays a string or stops the batch. tests/compat's transforms/outbox_expand proves the common case
identical to Debezium 3.6.3; these cover the edges it cannot run (Debezium's connector stops on them)."""

from __future__ import annotations

import pytest

from walflow.transforms.json_payload import ExpansionFailed, ExpansionRefused, expand


def test_an_object_becomes_a_struct_named_by_its_path() -> None:
    schema, value = expand('{"a": 1, "b": {"c": "x", "n": null}, "e": [], "l": [2147483648], "f": 0.5}', "payload")
    assert schema == {
        "type": "struct",
        "fields": [
            {"type": "int32", "optional": True, "field": "a"},
            {
                "type": "struct",
                "fields": [{"type": "string", "optional": True, "field": "c"}],
                "optional": True,
                "name": "payload.b",
                "field": "b",
            },
            {"type": "array", "items": {"type": "int64", "optional": True}, "optional": True, "field": "l"},
            {"type": "double", "optional": True, "field": "f"},
        ],
        "optional": True,
        "name": "payload",
    }
    assert value == {"a": 1, "b": {"c": "x"}, "l": [2147483648], "f": 0.5}


def test_nulls_as_optional_bytes() -> None:
    schema, value = expand('{"n": null}', "payload", null_as_bytes=True)
    assert schema["fields"] == [{"type": "bytes", "optional": True, "field": "n"}] and value == {"n": None}


def test_what_stays_a_string_and_what_stops_the_batch() -> None:
    # Debezium logs "JSON expansion failed" and keeps the text: not JSON, or an array of mixed kinds or widths
    for text in ("plain text", " {}", '{"a": ', '{"l": [1, "x"]}', '{"l": [1, 2147483648]}', '{"l": [null]}'):
        with pytest.raises(ExpansionFailed):
            expand(text, "payload")
    # Debezium's connector stops (a Struct refuses the value): a top-level array, a number beyond 64 bits, an array
    # of objects whose merged field takes another element's type
    for text in ("[1, 2]", '{"h": 123456789012345678901234567890}', '{"l": [{"a": 1}, {"a": "x"}]}'):
        with pytest.raises(ExpansionRefused):
            expand(text, "payload")
