"""A producer that runs the connector's transform chain on every record before queueing it.

Every path that writes records (stream batches, both snapshot paths, the snapshot's reader processes) is given its
producer through :func:`with_transforms`, so the chain applies to all of them alike, as Kafka Connect applies it to
every record a source task returns. Walflow's own schema topic (the lake's facts) is not the connector's output and
passes untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import orjson

from walflow.config.connector import ConnectorConfig
from walflow.kafka import EventProducer, Headers
from walflow.transforms.chain import TransformChain
from walflow.transforms.record import Codec, Record, Schema

log = logging.getLogger(__name__)

T = TypeVar("T")


class TransformingProducer:
    """An :class:`EventProducer` seen through the chain: records go in as walflow builds them and reach Kafka as
    the chain leaves them (on the topic it routes them to, which is created then), or not at all when it drops them.

    ``sent`` counts the records handed in, kept or dropped (callers find a refused record's row by it);
    ``dropped`` those the chain dropped.
    """

    def __init__(self, inner: EventProducer, config: ConnectorConfig) -> None:
        self.inner = inner
        self.codec = Codec(
            config.key_converter_schemas_enable,
            config.value_converter_schemas_enable,
            config.key_converter_schemas_enable,
        )
        self.chain = TransformChain(config.transforms, self.codec)
        self.untouched = {config.schema_topic}
        self.sent = 0
        self.dropped = 0
        #: the schemas of :meth:`send_event`'s records, by the text they serialise to
        self._schemas: dict[bytes, Schema] = {}
        #: a chain of one plain ExtractNewRecordState: envelope schema text -> unwrapped schema text
        self._unwrap: dict[bytes, bytes] = {}
        #: under a chain of one plain ExtractNewRecordState, how a created, updated or read row is sent: its
        #: unwrapped record written without building the envelope (:meth:`_unwrapped`); ``None`` otherwise
        self.send_row: Callable[..., None] | None = self._unwrapped if _plain_unwrap(config) else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def ensure_topic(self, topic: str) -> None:
        # the chain decides where records go: their topics are created as they are sent
        if topic in self.untouched:
            self.inner.ensure_topic(topic)

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None = None) -> None:
        if topic in self.untouched:
            self.inner.send(topic, key, value, headers)
            self.sent += 1
            return
        self._send(self.codec.decode(topic, key, value, headers))

    def send_event(
        self, topic: str, key_prefix: bytes, key: Any, value_prefix: bytes, payload: Any, headers: Headers | None = None
    ) -> None:
        """:meth:`send` for a record walflow has not serialised yet: its key and value as data, each with the text its
        schema serialises to (:meth:`Serializer.prefix`), which is parsed once per schema. The stream's changes come
        this way, so the chain reads no JSON back."""
        if self.send_row is not None and isinstance(payload, dict) and payload.get("after") is not None:
            self.send_row(topic, key_prefix, key, value_prefix, payload["after"], headers)
            return
        schemas = self._schemas
        key_schema = None
        if key is not None:
            key_schema = schemas.get(key_prefix)
            if key_schema is None:
                key_schema = schemas[key_prefix] = _schema_of(key_prefix)
        value_schema = schemas.get(value_prefix)
        if value_schema is None:
            value_schema = schemas[value_prefix] = _schema_of(value_prefix)
        self._send(Record(topic, key_schema, key, value_schema, payload, list(headers) if headers else []))

    def _unwrapped(
        self,
        topic: str,
        key_prefix: bytes,
        key: Any,
        value_prefix: bytes,
        after: dict[str, Any],
        headers: Headers | None,
    ) -> None:
        """A created, updated or read row under a chain of one plain ``ExtractNewRecordState`` (most deployments'
        chain): its unwrapped record written at once, without the envelope or a :class:`Record` (what
        :class:`~walflow.transforms.debezium.ExtractNewRecordState` makes of it; tests/compat's ``unwrap_plain``)."""
        dumps = orjson.dumps
        self.send_row_json(topic, key_prefix, None if key is None else dumps(key), value_prefix, dumps(after), headers)

    def send_row_json(
        self,
        topic: str,
        key_prefix: bytes,
        key_json: bytes | None,
        value_prefix: bytes,
        row_json: bytes,
        headers: Headers | None,
    ) -> None:
        """:meth:`_unwrapped` for a row (and its key's payload) already serialised: the row's JSON is the record's
        payload as it is (``TableSchema.json_row`` gives both)."""
        prefix = self._unwrap.get(value_prefix) or self._unwrap_schema(topic, value_prefix)
        value = prefix + row_json + b"}" if self.codec.value_schemas else row_json
        if key_json is not None and self.codec.key_schemas:
            key_json = key_prefix + key_json + b"}"
        self.inner.send(topic, key_json, value, headers)
        self.sent += 1

    def _unwrap_schema(self, topic: str, value_prefix: bytes) -> bytes:
        """The unwrapped schema's text, for an envelope schema's text: what the chain's ExtractNewRecordState makes
        of the schema, asked once."""
        envelope = _schema_of(value_prefix)
        record = self.chain.apply(Record(topic, None, None, envelope, {"after": {}, "before": None, "op": "c"}, []))
        assert record is not None and record.value_schema is not None
        known = self._unwrap[value_prefix] = b'{"schema":' + orjson.dumps(record.value_schema) + b',"payload":'
        self.inner.ensure_topic(topic)
        return known

    def _send(self, record: Record) -> None:
        out = self.chain.apply(record)
        if out is None:
            self.dropped += 1
        else:
            out_key, out_value = self.codec.encode(out)
            self.inner.ensure_topic(out.topic)
            self.inner.send(out.topic, out_key, out_value, out.headers or None)
        self.sent += 1

    def send_records(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes]], headers: Headers | None = None
    ) -> None:
        for key, value in records:
            self.send(topic, key, value, headers)
        self.inner.serve()

    def send_all(
        self,
        topic: str,
        items: Iterable[T],
        encode: Callable[[T], tuple[bytes | None, bytes]],
        headers: Headers | None = None,
    ) -> int:
        before = self.sent
        for item in items:
            key, value = encode(item)
            self.send(topic, key, value, headers)
        return self.sent - before

    def add_sent(self, records: int, size: int) -> None:
        self.inner.add_sent(records, size)
        self.sent += records

    @property
    def acked(self) -> int:
        return self.inner.acked + self.dropped


def _plain_unwrap(config: ConnectorConfig) -> bool:
    """Whether the chain is one ``ExtractNewRecordState`` that leaves a created or updated row as it is: no
    predicate, no fields or headers added, no routing, no dropped fields, no ``__deleted`` (rewrite modes)."""
    if len(config.transforms) != 1:
        return False
    (spec,) = config.transforms
    s = spec.settings
    return (
        spec.spec.kind == "unwrap" and spec.predicate is None
        and not s["add.fields"] and not s["add.headers"] and not s["route.by.field"]
        and not s["drop.fields.header.name"]
        and s["delete.tombstone.handling.mode"] in ("tombstone", "drop", "delete-to-tombstone")
    )  # fmt: skip


def _schema_of(prefix: bytes) -> Schema:
    """The schema in a :meth:`Serializer.prefix` text (``{"schema":<schema>,"payload":``)."""
    return cast(Schema, orjson.loads(prefix[len(b'{"schema":') : -len(b',"payload":')]))


def with_transforms(producer: EventProducer, config: ConnectorConfig) -> EventProducer:
    """``producer`` itself when the connector declares no transforms, else ``producer`` behind its chain."""
    if not config.transforms or isinstance(producer, TransformingProducer):
        return producer
    log.info(
        "transforms %s run on every record of connector %s", ", ".join(t.alias for t in config.transforms), config.name
    )
    return cast(EventProducer, TransformingProducer(producer, config))
