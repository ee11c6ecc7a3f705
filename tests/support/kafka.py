"""Kafka of the tests: the embedded broker's address, a producer, reading topics back to their end, replaying
change events, and deleting a test's topics."""

from __future__ import annotations

import os
import uuid
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, TopicPartition

from walflow.kafka import EventProducer, producer_settings


def bootstrap() -> str:
    return os.environ["WALFLOW_KAFKA_BOOTSTRAP"]


def producer(partitions: int = 1) -> EventProducer:
    return EventProducer(producer_settings({"bootstrap.servers": bootstrap()}), partitions)


def delete_topics_of(names: list[str]) -> None:
    """Delete the topics whose names contain one of ``names`` (each holds a random tag, so no other test's topic
    does). The embedded broker's work per request grows with its count of topics (measured: about 3 ms of its CPU
    to create a topic and produce 50 records to it among 20 topics, 19 ms among 1,040), and a whole ``make test``
    would otherwise leave about a thousand."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if not names:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap()})
    try:
        topics = [t for t in admin.list_topics(timeout=10).topics if any(n in t for n in names)]
    except KafkaException:
        return  # best effort: the broker is down after a test that stopped it and failed; its topics are gone anyway
    if not topics:
        return
    for future in admin.delete_topics(topics, operation_timeout=30, request_timeout=30).values():
        try:
            future.result()
        except Exception:
            pass


class Record:
    """One Kafka record read back, with its key and value parsed."""

    def __init__(self, msg: Any) -> None:
        self.topic: str = msg.topic()
        self.partition: int = msg.partition()
        self.offset: int = msg.offset()
        self.raw_key: bytes | None = msg.key()
        self.raw_value: bytes | None = msg.value()
        self.key = orjson.loads(self.raw_key) if self.raw_key is not None else None
        self.value = orjson.loads(self.raw_value) if self.raw_value is not None else None
        self.headers = dict(msg.headers() or [])

    @property
    def payload(self) -> Any:
        if self.value is None:
            return None
        return (
            self.value.get("payload", self.value)
            if isinstance(self.value, dict) and "schema" in self.value
            else self.value
        )

    @property
    def key_payload(self) -> Any:
        if self.key is None:
            return None
        return self.key.get("payload") if isinstance(self.key, dict) and "schema" in self.key else self.key

    @property
    def op(self) -> str | None:
        p = self.payload
        return p.get("op") if isinstance(p, dict) else None

    def __repr__(self) -> str:
        return f"Record({self.topic}@{self.offset}, key={self.key_payload}, op={self.op})"


#: Consumer settings of the tests' reads to a partition's end: at the end the broker holds a fetch this long before
#: it answers with nothing new (librdkafka's default is 500 ms, half a second per read to EOF).
READ_TO_END = {"fetch.wait.max.ms": 10}


def read_topic(topic: str, timeout: float = 10.0) -> list[Record]:
    """Every record of ``topic`` (all partitions), read to the end (EOF), in offset order per partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(),
            "group.id": f"walflow-test-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            **READ_TO_END,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        tmeta = metadata.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            return []
        partitions = sorted(tmeta.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        done: set[int] = set()
        records: list[Record] = []
        while len(done) < len(partitions):
            msg = consumer.poll(timeout)
            if msg is None:
                raise TimeoutError(f"no EOF on {topic} after {timeout} s")
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                if msg.error().code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return []
                raise RuntimeError(msg.error().str())
            records.append(Record(msg))
        return records
    finally:
        consumer.close()


def replay(records: list[Record]) -> dict[Any, dict[str, Any]]:
    """Apply change events in order, the way a sink would: the table state they describe, by key."""
    state: dict[Any, dict[str, Any]] = {}
    for rec in records:
        if rec.value is None:
            continue
        p = rec.payload
        key = orjson.dumps(rec.key_payload, option=orjson.OPT_SORT_KEYS)
        if p["op"] in ("c", "r", "u"):
            state[key] = p["after"]
        elif p["op"] == "d":
            state.pop(key, None)
        elif p["op"] == "t":
            state.clear()
    return state
