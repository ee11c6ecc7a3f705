"""The record format of walflow.records.envelope: Debezium 3.6.3's and the pre-2.6 one, and Java's HashMap order."""

from __future__ import annotations

import orjson

from tests.support import connector
from walflow.records.envelope import EventFormat, java_hash_map_order, java_string_hash


def test_current_format_is_debezium_3_6() -> None:
    fmt = EventFormat(connector("fmt"))
    assert fmt.version == "3.6.3.Final"
    assert [f["field"] for f in fmt.source_schema["fields"]][-4:] == ["txId", "lsn", "xmin", "origin", "origin_lsn"][
        -4:
    ]
    assert fmt.source_schema["version"] == 1
    payload = fmt.envelope(None, {"id": 1}, {"x": 1}, "c", None)
    assert list(payload) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    assert payload["ts_us"] // 1000 == payload["ts_ms"] and payload["ts_ns"] // 1000 == payload["ts_us"]
    source = fmt.source("p", "db", "public", "t", ts_us=1_500_000_123, sequence='[null,"5"]', tx_id=7, lsn=5)
    assert (source["ts_ms"], source["ts_us"], source["ts_ns"]) == (1_500_000, 1_500_000_123, 1_500_000_123_000)
    assert list(source)[-2:] == ["origin", "origin_lsn"]
    assert fmt.tx_key_schema["version"] == 1 and fmt.heartbeat_key_schema["version"] == 1
    items = fmt.tx_value_schema["fields"][3]["items"]
    assert items["name"] == "event.collection" and items["optional"] is True
    names = [name for name, _ in fmt.context_headers]
    assert names == [f"__debezium.context.{n}" for n in ("connectorLogicalName", "taskId", "connectorName", "runId")]
    assert orjson.loads(fmt.context_headers[0][1]) == {
        "schema": {"type": "string", "optional": False},
        "payload": "fmt",
    }


def test_pre_2_6_format_keeps_the_old_envelope() -> None:
    fmt = EventFormat(connector("old", **{"walflow.event.format": "pre-2.6"}))
    assert fmt.version == "2.5.4.Final"
    assert "version" not in fmt.source_schema
    assert "ts_us" not in [f["field"] for f in fmt.source_schema["fields"]]
    payload = fmt.envelope(None, {"id": 1}, {"x": 1}, "c", None)
    assert list(payload) == ["before", "after", "source", "op", "ts_ms", "transaction"]
    assert "version" not in fmt.tx_key_schema and fmt.context_headers == []
    assert list(fmt.source("p", "db", "s", "t", ts_us=2_000)) == [
        "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "schema", "table", "txId", "lsn", "xmin",
    ]  # fmt: skip


def test_java_string_hash() -> None:
    # values of Java's String.hashCode() (printed by a JVM)
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("public.t1") == 1446872034
    assert java_string_hash("€") == 8364
    assert java_string_hash("\U0001f600x") == 54959989  # a supplementary character counts as two UTF-16 units


def test_java_hash_map_order() -> None:
    # the orders Debezium 3.6.3 wrote (seen in the differential suite)
    assert java_hash_map_order(["key4", "key5"]) == ["key5", "key4"]
    assert java_hash_map_order(["key 2", "key_#1"]) == ["key_#1", "key 2"]
    tables = [f"public.t{i}" for i in range(1, 16)]
    assert java_hash_map_order(tables) == [
        "public.t14", "public.t15", "public.t12", "public.t13", "public.t8", "public.t7", "public.t9", "public.t4",
        "public.t3", "public.t6", "public.t5", "public.t10", "public.t11", "public.t2", "public.t1",
    ]  # fmt: skip
