"""The record format: envelope, ``source`` block, transaction metadata, heartbeats, logical messages, headers.

Debezium 3.6.3 (the default) and the form walflow wrote before, which is Debezium's before 2.6
(``walflow.event.format: pre-2.6``, for consumers pinned to it), differ in:

- the envelope: 3.x adds ``ts_us``/``ts_ns`` after ``ts_ms``, puts ``transaction`` before ``op`` and has schema
  ``version`` 2;
- ``source``: 3.x adds ``ts_us``/``ts_ns`` after ``sequence``, ``origin``/``origin_lsn`` at the end, and the
  schema has ``version`` 1; its ``version`` field names the release (3.6.3.Final, 2.5.4.Final);
- transaction metadata, heartbeat and message schemas carry ``version`` 1 in 3.x, and a transaction's
  ``data_collections`` items are optional structs named ``event.collection``;
- 3.x adds the ``__debezium.context.*`` headers (connector logical name, task id, connector name, run id) to
  every data change event.

Everything else (values, keys, sequences, snapshot markers) is the same in both forms.
:class:`EventFormat` builds these pieces once per connector, so the per-event work stays one dict and one
``orjson.dumps``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

#: The Debezium release whose PostgreSQL event format walflow reproduces by default.
DEBEZIUM_VERSION = "3.6.3.Final"
#: The release named in ``source.version`` by the pre-2.6 form.
LEGACY_VERSION = "2.5.4.Final"
#: ``walflow.event.format`` values.
CURRENT, PRE_2_6 = "3.6", "pre-2.6"

_SNAPSHOT_FIELD = {
    "type": "string",
    "optional": True,
    "name": "io.debezium.data.Enum",
    "version": 1,
    "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
    "default": "false",
    "field": "snapshot",
}


def _f(type_: str, name: str, optional: bool) -> dict[str, Any]:
    return {"type": type_, "optional": optional, "field": name}


def source_schema(legacy: bool) -> dict[str, Any]:
    fields = [
        _f("string", "version", False),
        _f("string", "connector", False),
        _f("string", "name", False),
        _f("int64", "ts_ms", False),
        _SNAPSHOT_FIELD,
        _f("string", "db", False),
        _f("string", "sequence", True),
    ]
    if not legacy:
        fields += [_f("int64", "ts_us", True), _f("int64", "ts_ns", True)]
    fields += [
        _f("string", "schema", False),
        _f("string", "table", False),
        _f("int64", "txId", True),
        _f("int64", "lsn", True),
        _f("int64", "xmin", True),
    ]
    if not legacy:
        fields += [_f("string", "origin", True), _f("int64", "origin_lsn", True)]
    schema: dict[str, Any] = {
        "type": "struct",
        "fields": fields,
        "optional": False,
        "name": "io.debezium.connector.postgresql.Source",
    }
    if not legacy:
        schema["version"] = 1
    schema["field"] = "source"
    return schema


TRANSACTION_BLOCK_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _f("string", "id", False),
        _f("int64", "total_order", False),
        _f("int64", "data_collection_order", False),
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


def _versioned(schema: dict[str, Any], legacy: bool) -> dict[str, Any]:
    return schema if legacy else {**schema, "version": 1}


def tx_schemas(legacy: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    key = _versioned(
        {
            "type": "struct",
            "fields": [_f("string", "id", False)],
            "optional": False,
            "name": "io.debezium.connector.common.TransactionMetadataKey",
        },
        legacy,
    )
    item: dict[str, Any] = {
        "type": "struct",
        "fields": [_f("string", "data_collection", False), _f("int64", "event_count", False)],
        "optional": legacy is False,
    }
    if not legacy:
        item["name"] = "event.collection"
        item["version"] = 1
    value = _versioned(
        {
            "type": "struct",
            "fields": [
                _f("string", "status", False),
                _f("string", "id", False),
                _f("int64", "event_count", True),
                {"type": "array", "items": item, "optional": True, "field": "data_collections"},
                _f("int64", "ts_ms", False),
            ],
            "optional": False,
            "name": "io.debezium.connector.common.TransactionMetadataValue",
        },
        legacy,
    )
    return key, value


def heartbeat_schemas(legacy: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    key = {
        "type": "struct",
        "fields": [_f("string", "serverName", False)],
        "optional": False,
        "name": "io.debezium.connector.common.ServerNameKey",
    }
    value = {
        "type": "struct",
        "fields": [_f("int64", "ts_ms", False)],
        "optional": False,
        "name": "io.debezium.connector.common.Heartbeat",
    }
    return _versioned(key, legacy), _versioned(value, legacy)


def message_schemas(source: dict[str, Any], content_type: str = "bytes") -> tuple[dict[str, Any], dict[str, Any]]:
    """Logical decoding messages (``<prefix>.message``): the same in both forms, apart from ``source``; the content
    is ``bytes``, or a string under a ``binary.handling.mode`` other than ``bytes``."""
    key = {
        "type": "struct",
        "fields": [_f("string", "prefix", True)],
        "optional": False,
        "name": "io.debezium.connector.postgresql.MessageKey",
        "version": 1,
    }
    value = {
        "type": "struct",
        "fields": [
            _f("string", "op", False),
            _f("int64", "ts_ms", True),
            source,
            TRANSACTION_BLOCK_SCHEMA,
            {
                "type": "struct",
                "fields": [_f("string", "prefix", True), _f(content_type, "content", True)],
                "optional": False,
                "name": "io.debezium.connector.postgresql.Message",
                "version": 1,
                "field": "message",
            },
        ],
        "optional": False,
        "name": "io.debezium.connector.postgresql.MessageValue",
        "version": 1,
    }
    return key, value


def envelope_schema(value_struct: dict[str, Any], name: str, legacy: bool) -> dict[str, Any]:
    """A table's envelope schema around its value struct."""
    before = {**value_struct, "field": "before"}
    after = {**value_struct, "field": "after"}
    source = source_schema(legacy)
    if legacy:
        fields = [
            before,
            after,
            source,
            _f("string", "op", False),
            _f("int64", "ts_ms", True),
            TRANSACTION_BLOCK_SCHEMA,
        ]
        return {"type": "struct", "fields": fields, "optional": False, "name": name, "version": 1}
    fields = [
        before,
        after,
        source,
        TRANSACTION_BLOCK_SCHEMA,
        _f("string", "op", False),
        _f("int64", "ts_ms", True),
        _f("int64", "ts_us", True),
        _f("int64", "ts_ns", True),
    ]
    return {"type": "struct", "fields": fields, "optional": False, "name": name, "version": 2}


def json_form(schema: dict[str, Any] | None, payload: Any, with_schema: bool) -> bytes:
    """One value in the JSON converter form (``{"schema":…,"payload":…}``, or the payload alone)."""
    if with_schema:
        return orjson.dumps({"schema": schema, "payload": payload})
    return orjson.dumps(payload)


_STRING_HEADER = {"type": "string", "optional": False}


class EventFormat:
    """The format of one connector's records (see the module's docstring), built once per connector run.

    :param run_id: the id of this run of the connector, sent in the ``__debezium.context.runId`` header (a new UUID
        by default: Debezium draws one per connector start, walflow per stream or snapshot task).
    """

    def __init__(self, config: Any, run_id: str | None = None) -> None:
        self.legacy = config.walflow_event_format == PRE_2_6
        self.version = LEGACY_VERSION if self.legacy else DEBEZIUM_VERSION
        self.source_schema = source_schema(self.legacy)
        self.tx_key_schema, self.tx_value_schema = tx_schemas(self.legacy)
        self.heartbeat_key_schema, self.heartbeat_value_schema = heartbeat_schemas(self.legacy)
        binary_mode = getattr(config, "binary_handling_mode", "bytes")
        self.message_key_schema, self.message_value_schema = message_schemas(
            self.source_schema, "bytes" if binary_mode == "bytes" else "string"
        )
        self.run_id = run_id or str(uuid.uuid4())
        key_schemas = config.key_converter_schemas_enable
        if self.legacy or not getattr(config, "extended_headers_enabled", True):
            self.context_headers: list[tuple[str, bytes]] = []
        else:
            # headers go through the JSON converter in the form the keys use
            self.context_headers = [
                (f"__debezium.context.{name}", json_form(_STRING_HEADER, value, key_schemas))
                for name, value in (
                    ("connectorLogicalName", config.topic_prefix),
                    ("taskId", "0"),
                    ("connectorName", "postgresql"),
                    ("runId", self.run_id),
                )
            ]

    def source(
        self,
        name: str,
        db: str,
        schema: str,
        table: str,
        *,
        ts_us: int,
        snapshot: str = "false",
        sequence: str | None = None,
        tx_id: int | None = None,
        lsn: int | None = None,
        origin: str | None = None,
        origin_lsn: int | None = None,
    ) -> dict[str, Any]:
        """A ``source`` block, its fields in the schema's order."""
        if self.legacy:
            return {
                "version": self.version, "connector": "postgresql", "name": name, "ts_ms": ts_us // 1000,
                "snapshot": snapshot, "db": db, "sequence": sequence, "schema": schema, "table": table, "txId": tx_id,
                "lsn": lsn, "xmin": None,
            }  # fmt: skip
        return {
            "version": self.version, "connector": (
                "postgresql"
            ), "name": name, "ts_ms": ts_us // 1000, "snapshot": snapshot,
            "db": db, "sequence": sequence, "ts_us": ts_us, "ts_ns": ts_us * 1000, "schema": schema, "table": table,
            "txId": tx_id, "lsn": lsn, "xmin": None, "origin": origin, "origin_lsn": origin_lsn,
        }  # fmt: skip

    def envelope(self, before: Any, after: Any, source: dict[str, Any], op: str, transaction: Any) -> dict[str, Any]:
        """One change event's payload, stamped with the processing time (hot path)."""
        ns = time.time_ns()
        if self.legacy:
            return {
                "before": before,
                "after": after,
                "source": source,
                "op": op,
                "ts_ms": ns // 1_000_000,
                "transaction": transaction,
            }
        return {
            "before": before, "after": after, "source": source, "transaction": transaction, "op": op,
            "ts_ms": ns // 1_000_000, "ts_us": ns // 1000, "ts_ns": ns,
        }  # fmt: skip

    def envelope_parts(self, op: str) -> tuple[bytes, bytes]:
        """The serialised text around a payload's ``source`` and processing time, for snapshot rows:
        ``<before/after>`` + ``,"source":`` … then the part after the source up to the time fields."""
        if self.legacy:
            return b',"source":', b',"op":"' + op.encode() + b'","ts_ms":'
        return b',"source":', b',"transaction":null,"op":"' + op.encode() + b'","ts_ms":'

    def processing_time(self) -> bytes:
        """The serialised processing-time fields that end an envelope (``ts_ms`` value onwards, without ``}``)."""
        ns = time.time_ns()
        if self.legacy:
            return b"%d" % (ns // 1_000_000)
        return b'%d,"ts_us":%d,"ts_ns":%d' % (ns // 1_000_000, ns // 1000, ns)

    def processing_tail(self) -> bytes:
        """What follows the processing time in a snapshot row's envelope."""
        return b',"transaction":null}' if self.legacy else b"}"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_copy_capacity(size: int) -> int:
    """The table size of ``new HashMap<>(m)`` for a map ``m`` of ``size`` entries (16 for an empty one)."""
    if size == 0:
        return 16
    wanted = int(size / 0.75 + 1.0)
    capacity = 1
    while capacity < wanted:
        capacity *= 2
    return capacity


def java_hash_map_order(keys: list[str], capacity: int = 16) -> list[str]:
    """The iteration order of a ``java.util.HashMap<String, …>`` filled with ``keys`` in this order.

    Debezium hands several maps to Jackson or the JSON converter as HashMaps (hstore values, a transaction's
    per-table counts), so their order is the map's: buckets by the spread hash in ascending order, insertion order
    within a bucket. The table doubles (keeping that relative order) whenever it is more than 3/4 full or a bucket
    reaches 9 entries while the table is smaller than 64. Buckets of 9 or more entries in a larger table become
    trees in Java, whose order this does not reproduce; String keys that collide that much do not occur in practice.
    ``capacity``: the table's first size (16, or what ``new HashMap<>(map)`` sizes for the map it copies:
    :func:`java_copy_capacity`).
    """
    buckets: dict[int, int] = {}
    hashes = []
    for count, key in enumerate(keys, start=1):
        h = java_string_hash(key) & 0xFFFFFFFF
        h ^= h >> 16
        hashes.append(h)
        index = h & (capacity - 1)
        buckets[index] = buckets.get(index, 0) + 1
        grow = count > capacity * 3 // 4 or (buckets[index] > 8 and capacity < 64)
        while grow:
            capacity *= 2
            buckets = {}
            for seen in hashes:
                buckets[seen & (capacity - 1)] = buckets.get(seen & (capacity - 1), 0) + 1
            grow = count > capacity * 3 // 4
    order = sorted(range(len(keys)), key=lambda i: hashes[i] & (capacity - 1))
    return [keys[i] for i in order]
