"""Debezium's Kafka signal channel (``signal.enabled.channels: source,kafka``): signals sent as Kafka messages, for
teams that may not write to the source database.

A signal is a message on ``signal.kafka.topic`` (by default ``<topic.prefix>-signal``) whose key is the connector's
``topic.prefix`` and whose value is ``{"id": ..., "type": "execute-snapshot", "data": {...}}``, as Debezium reads
them. Each stream batch reads the messages after the last one an earlier batch took (the offsets live in the state
table with the incremental snapshots' progress, saved once the batch's records are acknowledged), at most
:data:`MAX_SIGNALS` of them, and hands each one to the incremental snapshots as a signal-table row would be.
Messages with another key are other connectors' and are passed over, as Debezium passes them over.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from walflow.config.connector import ConnectorConfig
from walflow.errors import DeliveryError, SourceError
from walflow.kafka import EventProducer, client_settings, consumer, list_topics
from walflow.source.signals import MAX_SIGNAL_BYTES

log = logging.getLogger(__name__)

#: the most signals one batch takes from the topic; the rest wait for the next batch
MAX_SIGNALS = 1000


@dataclass(frozen=True)
class KafkaSignal:
    partition: int
    offset: int
    #: the signal as a signal-table row: id, type and data (the data object as JSON text)
    values: dict[str, Any]


def _settings(config: ConnectorConfig, kafka: dict[str, Any]) -> dict[str, Any]:
    settings = client_settings(kafka)
    if config.signal_kafka_bootstrap_servers:
        settings["bootstrap.servers"] = config.signal_kafka_bootstrap_servers
    settings["group.id"] = config.signal_kafka_group_id
    settings.update(config.signal_consumer)
    return settings


def read_kafka_signals(
    config: ConnectorConfig, kafka: dict[str, Any], after: dict[int, int], timeout: float = 30.0
) -> tuple[list[KafkaSignal], dict[int, int]]:
    """The connector's signals on its signal topic after the offsets in ``after`` (per partition), in offset order,
    and the offset of the last message read in each partition (other connectors' messages included: they are
    passed over once).

    :param kafka: the Kafka Connection's client settings (the producer's).
    :raises DeliveryError: when the topic cannot be read.
    """
    settings = _settings(config, kafka)
    topic = config.signal_topic
    partitions = list_topics(settings).get(topic)
    if not partitions:
        return [], {}
    client = consumer(settings)
    signals: list[KafkaSignal] = []
    read: dict[int, int] = {}
    try:
        client.assign([TopicPartition(topic, p, after[p] + 1 if p in after else OFFSET_BEGINNING) for p in partitions])
        open_partitions = set(partitions)
        poll_s = max(config.signal_kafka_poll_timeout_ms / 1000, timeout)
        while open_partitions and len(signals) < MAX_SIGNALS:
            msg = client.poll(poll_s)
            if msg is None:
                raise DeliveryError(
                    f"the signal topic {topic!r} gave no answer within {poll_s:.0f} s; "
                    "the batch stopped before reading the slot"
                )
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(msg.partition())
                    continue
                raise DeliveryError(f"reading the signal topic {topic!r}: {error.str()}")
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None  # a consumed message (not an error) has both
            read[partition] = offset
            signal = _signal(config, partition, offset, msg.key(), msg.value())
            if signal is not None:
                signals.append(signal)
    finally:
        client.close()
    return signals, read


def _signal(
    config: ConnectorConfig, partition: int, offset: int, key: bytes | None, value: bytes | None
) -> KafkaSignal | None:
    where = f"signal topic {config.signal_topic!r} partition {partition} offset {offset}"
    if key is None or key.decode("utf-8", "replace") != config.topic_prefix:
        log.info("%s: key %r is not this connector's (%r); passed over", where, key, config.topic_prefix)
        return None
    if not value:
        return None
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        log.warning("%s: not JSON (%s); passed over", where, exc)
        return None
    if not isinstance(document, dict):
        log.warning("%s: not a JSON object; passed over", where)
        return None
    data = document.get("data")
    return KafkaSignal(
        partition,
        offset,
        {
            "id": document.get("id") or f"kafka:{partition}:{offset}",
            "type": document.get("type"),
            "data": orjson.dumps(data if data is not None else {}).decode(),
        },
    )


def send_kafka_signal(
    config: ConnectorConfig, producer: EventProducer, kind: str, data: dict[str, Any], signal_id: str | None = None
) -> str:
    """Write a signal to the connector's signal topic, keyed by its ``topic.prefix`` as Debezium reads them, and wait
    for Kafka's acknowledgement; the next stream batch acts on it. Returns its id.

    :raises SourceError: when the connector does not read the Kafka channel, or the signal is too large.
    """
    if "kafka" not in config.signal_enabled_channels:
        raise SourceError(
            f"connector {config.name!r} does not read signals from Kafka: add 'kafka' to 'signal.enabled.channels' "
            "(its topic is 'signal.kafka.topic', by default <topic.prefix>-signal)"
        )
    signal_id = signal_id or uuid.uuid4().hex
    value = orjson.dumps({"id": signal_id, "type": kind, "data": data})
    if len(value) > MAX_SIGNAL_BYTES:
        raise SourceError(f"the signal is {len(value)} bytes; signals are limited to {MAX_SIGNAL_BYTES}")
    producer.ensure_topic(config.signal_topic)
    producer.send(config.signal_topic, config.topic_prefix.encode(), value)
    producer.flush(config.walflow_kafka_flush_timeout_s)
    return signal_id
