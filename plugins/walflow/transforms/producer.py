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

from walflow.config.connector import ConnectorConfig
from walflow.kafka import EventProducer
from walflow.transforms.chain import TransformChain
from walflow.transforms.record import Codec

log = logging.getLogger(__name__)

T = TypeVar("T")
Headers = list[tuple[str, bytes]]


class TransformingProducer:
    """An :class:`EventProducer` seen through the chain: records go in as walflow builds them and reach Kafka as
    the chain leaves them (on the topic it routes them to, which is created then), or not at all when it drops them.

    ``sent`` counts the records handed in, kept or dropped (callers find a refused record's row by it);
    ``dropped`` those the chain dropped.
    """

    def __init__(self, inner: EventProducer, config: ConnectorConfig) -> None:
        self.inner = inner
        self.codec = Codec(config.key_converter_schemas_enable, config.value_converter_schemas_enable, config.key_converter_schemas_enable)
        self.chain = TransformChain(config.transforms, self.codec)
        self.untouched = {config.schema_topic}
        self.sent = 0
        self.dropped = 0

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
        record = self.chain.apply(self.codec.decode(topic, key, value, headers))
        if record is None:
            self.dropped += 1
        else:
            out_key, out_value = self.codec.encode(record)
            self.inner.ensure_topic(record.topic)
            self.inner.send(record.topic, out_key, out_value, cast(Headers, record.headers) or None)
        self.sent += 1

    def send_records(self, topic: str, records: Sequence[tuple[bytes | None, bytes]], headers: Headers | None = None) -> None:
        for key, value in records:
            self.send(topic, key, value, headers)
        self.inner._producer.poll(0)

    def send_all(self, topic: str, items: Iterable[T], encode: Callable[[T], tuple[bytes | None, bytes]], headers: Headers | None = None) -> int:
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


def with_transforms(producer: EventProducer, config: ConnectorConfig) -> EventProducer:
    """``producer`` itself when the connector declares no transforms, else ``producer`` behind its chain."""
    if not config.transforms or isinstance(producer, TransformingProducer):
        return producer
    log.info("transforms %s run on every record of connector %s", ", ".join(t.alias for t in config.transforms), config.name)
    return cast(EventProducer, TransformingProducer(producer, config))
