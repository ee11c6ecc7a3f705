"""The lake job's typed internal data: the decoder's SplitRecord and the driver's RunStats/KeyCut."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import orjson

from walflow.lake import columns as C
from walflow.lake import frames
from walflow.lake.decoder import SplitRecord, _split_tuples, split_records

SCHEMA = {"type": "struct", "fields": [{"type": "int32", "field": "id", "optional": False}], "optional": False}


def value(op: str, row: dict[str, Any], schema: dict[str, Any] | None = SCHEMA) -> bytes:
    payload = {"op": op, "before": None, "after": row, "source": {"schema": "public", "table": "t", "lsn": 1}}
    return orjson.dumps({"schema": schema, "payload": payload} if schema is not None else payload)


RECORDS: list[tuple[int, int, bytes | None, bytes | None]] = [
    (0, 0, b'{"id":1}', value("c", {"id": 1})),
    (0, 1, b'{"id":2}', value("c", {"id": 2})),
    (1, 2, b'{"id":1}', None),  # a tombstone
    (1, 3, None, b"not json"),
    (1, 4, None, value("c", {"id": 3}, schema=None)),
]


def test_split_records_yields_named_fields() -> None:
    first, second, odd, plain = list(split_records(RECORDS))
    assert all(type(s) is SplitRecord for s in (first, second, odd, plain))
    assert first.schema_hash and first.schema_text is not None and second.schema_text is None
    assert second.schema_hash == first.schema_hash
    assert (second.partition, second.offset, second.keyed, second.key) == (0, 1, True, b'{"id":2}')
    assert second.payload["after"] == {"id": 2} and second.size == len(RECORDS[1][3] or b"") and second.error is None
    assert odd.schema_hash is None and odd.payload is None and odd.error and odd.error.startswith("not JSON")
    assert plain.schema_hash == "" and plain.keyed is False and plain.payload["after"] == {"id": 3}
    # a SplitRecord still unpacks in field order
    schema_hash, _text, partition, offset, *_rest, error = first
    assert (schema_hash, partition, offset, error) == (first.schema_hash, 0, 0, None)


def test_split_tuples_are_split_records_as_plain_tuples() -> None:
    """The decoder's hot loop reads plain tuples of SplitRecord's fields, in SplitRecord's order."""
    for typed in (False, True):
        for tombstones in (False, True):
            named = list(split_records(RECORDS, typed=typed, tombstones=tombstones))
            plain = list(_split_tuples(RECORDS, typed=typed, tombstones=tombstones))
            assert all(type(t) is tuple and len(t) == len(SplitRecord._fields) for t in plain)
            assert [tuple(s) for s in named] == plain
    tombstone = next(s for s in split_records(RECORDS, tombstones=True) if s.offset == 2)
    assert (tombstone.schema_hash, tombstone.payload, tombstone.size, tombstone.keyed) == ("", None, 0, True)


def test_key_cut_and_run_stats_fields() -> None:
    rows = [
        {C.KEY: b'{"id":1}', C.PARTITION: 0, C.OFFSET: 0, C.POS_A: 1, C.POS_B: 1},
        {C.KEY: b'{"id":1,"v":2}', C.PARTITION: 0, C.OFFSET: 5, C.POS_A: 2, C.POS_B: 2},
    ]
    cut = frames.key_cut(rows)
    assert cut == {
        "key_names": ["id"],
        "key_cut": {0: 5},
        "key_change": (["id"], ["id", "v"]),
        "newest_key_names": ["id", "v"],
    }
    one = frames.key_cut(rows[:1])
    assert one["key_cut"] == {} and one["key_change"] is None
    assert frames.key_cut([]) == {"key_names": [], "key_cut": {}, "key_change": None, "newest_key_names": []}
    # RunStats holds key_cut's fields under the same names
    assert set(frames.KeyCut.__annotations__) <= {f.name for f in dataclasses.fields(frames.RunStats)}


def test_run_stats_pickles() -> None:
    stats = frames.RunStats(
        counts={"c": 1},
        schemas={"": ""},
        newest=None,
        key_names=["id"],
        key_cut={},
        key_change=None,
        newest_key_names=["id"],
        toasted=0,
        keyless=0,
        sources={("public", "t")},
        problems=[],
        problem_count=0,
        skipped=[],
        kinds={},
        overflowed=0,
    )
    assert pickle.loads(pickle.dumps(stats)) == stats
