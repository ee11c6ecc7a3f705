"""Kafka for the lake job: record fingerprints, a partition's offset bounds, the schema topic's facts, and the offset
slices the executors read.

Only plain consumer features are used (assign, poll, partition EOF), so the embedded broker and Apache Kafka
behave alike (ListOffsets can be short on the embedded broker, so a partition's end is found by
consuming to EOF, with :func:`walflow.kafka.partition_end`). ``kafka`` is always a dict of librdkafka settings with
``bootstrap.servers``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, TopicPartition

from walflow.errors import BrokerUnavailableError, LakeError
from walflow.kafka import SMALL_READS, consumed_offset, consumer, list_topics, partition_end
from walflow.records.facts import FACT_KINDS, FORMAT

#: Consumer settings of the bulk reads. librdkafka stops fetching while its local queue holds more than
#: ``queued.max.messages.kbytes`` (or ``queued.min.messages`` records) and then waits ``fetch.queue.backoff.ms``
#: before it looks again: at the default 1 s the fetcher idles while the decoder drains the queue, so fetching
#: and decoding take turns instead of overlapping; at 0 it spins on a full queue and takes the decoder's CPU
#: (twice the CPU per record). 16 MB fetches into a 64 MB queue with a 20 ms back-off read the apply
#: benchmark's 3 kB records about four times as fast as the defaults. The Kafka Connection's extras override these.
READ_SETTINGS: dict[str, Any] = {
    "fetch.max.bytes": 16 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 64 * 1024,
    "fetch.queue.backoff.ms": 20,
}

Record = tuple[int, int, "bytes | None", "bytes | None"]  # partition, offset, key, value


def offset_bounds(kafka: dict[str, Any], topic: str, partition: int, start: int) -> tuple[int, int]:
    """A partition's first offset still held (the low watermark: retention moves it) and its end offset."""
    client = consumer(kafka, **SMALL_READS)
    try:
        low, _high = client.get_watermark_offsets(TopicPartition(topic, partition), timeout=30.0)
        return low, partition_end(client, topic, partition, start)
    finally:
        client.close()


def record_fingerprint(client: Consumer, topic: str, partition: int, offset: int, timeout: float = 30.0) -> str:
    """A short hash of the record at ``offset`` (key and value), or "" when the partition has no such record.

    Stored with the lake's offsets, it tells a topic that was recreated and refilled (same offsets, other
    records) from the topic the lake read.
    """
    client.assign([TopicPartition(topic, partition, offset)])
    msg = client.poll(timeout)
    if msg is None:
        raise BrokerUnavailableError(
            f"no answer from {topic}[{partition}] within {timeout:.0f} s: is the broker reachable?"
        )
    error = msg.error()
    if error:
        if error.code() == KafkaError._PARTITION_EOF:
            return ""
        raise LakeError(f"{topic}[{partition}]: {error.str()}")
    if msg.offset() != offset:
        return ""  # the record is gone (retention, or a shorter recreated topic)
    digest = hashlib.sha1()
    digest.update(msg.key() or b"")
    digest.update(b"\0")
    digest.update(msg.value() or b"")
    return digest.hexdigest()[:16]


def fingerprints(kafka: dict[str, Any], topic: str, offsets: dict[int, int]) -> dict[int, str]:
    """Fingerprints of the records just before each partition's offset (the last ones applied)."""
    client = consumer(kafka, **SMALL_READS)
    try:
        return {p: record_fingerprint(client, topic, p, o - 1) for p, o in offsets.items() if o > 0}
    finally:
        client.close()


def first_records(kafka: dict[str, Any], topic: str, partitions: list[int], timeout: float = 10.0) -> Iterator[Record]:
    """The records of each partition from its beginning, until the caller stops (used to find a topic's source)."""
    client = consumer(kafka, **SMALL_READS)
    try:
        for partition in partitions:
            # offset 0, not OFFSET_BEGINNING (which costs a ListOffsets round trip of about half a second here);
            # a topic whose first records were deleted by retention starts at its earliest (auto.offset.reset)
            client.assign([TopicPartition(topic, partition, 0)])
            deadline = time.monotonic() + timeout
            while True:
                if time.monotonic() >= deadline:
                    # the caller would name the lake table after the topic alone, which for some source names is
                    # another table (see LakeJob.lake_name)
                    raise BrokerUnavailableError(
                        f"{topic}[{partition}]: neither a record nor the partition's end within {timeout:.0f} s: is "
                        "the broker reachable?"
                    )
                msg = client.poll(1.0)
                if msg is None:
                    continue
                error = msg.error()
                if error:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    raise LakeError(f"{topic}[{partition}]: {error.str()}")
                yield partition, consumed_offset(msg.offset(), topic, partition), msg.key(), msg.value()
    finally:
        client.close()


def last_records(
    kafka: dict[str, Any], topic: str, slices: list[tuple[int, int, int]], window: int = 16
) -> list[Record]:
    """The last record with a value (not a tombstone) among the last ``window`` records of each (partition, start,
    end) slice: what the driver samples to guess the run's newest schema."""
    out = []
    client = consumer(kafka, **SMALL_READS)
    try:
        for partition, start, end in slices:
            last = None
            client.assign([TopicPartition(topic, partition, max(start, end - window))])
            while True:
                msg = client.poll(30)
                if msg is None or msg.error():
                    break
                offset = consumed_offset(msg.offset(), topic, partition)
                if offset >= end:
                    break
                if msg.value() is not None:
                    last = (partition, offset, msg.key(), msg.value())
                if offset + 1 >= end:
                    break
            if last is not None:
                out.append(last)
    finally:
        client.close()
    return out


def read_slice(
    kafka: dict[str, Any], topic: str, partition: int, start: int, end: int, current: list[Any] | None = None
) -> Iterator[Record]:
    """Yield (partition, offset, key, value) for offsets [start, end) of one partition (runs on the executors).

    :param current: when given, its first item is set to the Kafka message of the record yielded last, whose headers
        a reader then fetches only for the records that need them (a list rather than a second generator around this
        one: this loop runs once per record)."""
    if end <= start:
        return
    client = consumer(kafka, **READ_SETTINGS)
    try:
        client.assign([TopicPartition(topic, partition, start)])
        idle_since = time.monotonic()
        position = start
        while True:
            # consume() returns when it has as many records as asked or the timeout passed: ask for no more than the
            # slice still holds, so that its last records do not wait out the timeout (half a second per small run)
            messages = client.consume(max(1, min(5000, end - position)), 0.5)
            if not messages:
                if time.monotonic() - idle_since > 60:
                    raise LakeError(f"{topic}[{partition}]: nothing to read before offset {end} for 60 s")
                continue
            idle_since = time.monotonic()
            for msg in messages:
                error = msg.error()
                if error:
                    if error.code() == KafkaError._PARTITION_EOF:
                        raise LakeError(
                            f"{topic}[{partition}] ended at {msg.offset()} before {end}: was the topic recreated?"
                        )
                    raise LakeError(f"{topic}[{partition}]: {error.str()}")
                offset = consumed_offset(msg.offset(), topic, partition)
                if offset >= end:
                    return
                position = offset + 1
                if current is not None:
                    current[0] = msg
                yield partition, offset, msg.key(), msg.value()
                if position >= end:
                    return
    finally:
        client.close()


#: the key the decoder writes out for a row event without one (:func:`walflow.lake.frames.key_cut` reads it as no
#: key fields): a table that lost its key shows as a key of its own
NO_KEY = b""


def key_names(key: bytes | bytearray | None) -> list[str]:
    """The field names of a record key (with or without its schema part); none for no key (None or :data:`NO_KEY`)."""
    if not key:
        return []
    doc = key_payload(key)
    return list(doc.keys()) if isinstance(doc, dict) else []


def key_payload(key: bytes | bytearray) -> Any:
    """A record key's fields: its payload when it has a schema part, else the key itself (parsed JSON).

    :raises orjson.JSONDecodeError: the key is not JSON."""
    doc = orjson.loads(bytes(key))
    if isinstance(doc, dict) and "schema" in doc and "payload" in doc:
        doc = doc["payload"]
    return doc


def read_facts(kafka: dict[str, Any], topic: str) -> list[dict[str, Any]]:
    """Every fact of the connector's schema topic (:mod:`walflow.capture.schema_facts`; a small topic: one record per
    definition change, and one start fact per initial snapshot), or none when the topic does not exist."""
    if not topic:
        return []
    partitions = list_topics(kafka).get(topic)
    if not partitions:
        return []
    facts = []
    for _p, _o, _key, value in first_records(kafka, topic, partitions):
        if value is None:
            continue
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue  # not walflow's: the topic is walflow's own, but a stray record must not stop the lake
        if (
            isinstance(doc, dict)
            and doc.get("format") == FORMAT
            and (isinstance(doc.get("fields"), list) or doc.get("kind") in FACT_KINDS)
        ):
            facts.append(doc)
    return facts
