"""Kafka with confluent-kafka: producing change events and knowing exactly what was acknowledged, creating topics,
and finding where a topic ends (the setup records it; the lake job reads up to it).

The producer is idempotent with ``acks=all``: records of one partition are written once and in order even
when librdkafka retries. :meth:`EventProducer.flush` waits for every delivery report and raises
:class:`~walflow.errors.DeliveryError` if any record failed, so the caller advances the replication slot
only past records Kafka really holds.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from typing import Any, TypeVar, cast

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from walflow.errors import BrokerUnavailableError, DeliveryError, LakeError, RecordTooLargeError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: a record's headers, (name, value) pairs: the connector's own carry bytes, a transform's may carry a null value
#: (Kafka Connect's headers can); either list is queued as it is
Headers = list[tuple[str, bytes]] | list[tuple[str, bytes | None]]
#: the same list as confluent-kafka's produce() declares it (its list of (name, text, bytes or null) pairs)
_KafkaHeaders = list[tuple[str, str | bytes | None]]

#: Settings walflow insists on, whatever the Connection says: they are what make "no event lost" hold.
REQUIRED_PRODUCER_SETTINGS = {"enable.idempotence": True, "acks": "all"}

#: Defaults that keep the producer's memory bounded and throughput high; a Connection may override them.
DEFAULT_PRODUCER_SETTINGS = {
    "linger.ms": 20,
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": 200000,
    "queue.buffering.max.kbytes": 131072,
    "compression.type": "lz4",
    "message.timeout.ms": 120000,
    # Java clients' partitioner, so keys land where Debezium's Java producer would put them.
    "partitioner": "murmur2_random",
}

#: the producer is polled (delivery reports served) each time the count of records sent is a multiple of this mask
#: plus one, 256: librdkafka's own work per record is the same however often it is polled, but every 256 records kept
#: a 1M-row incremental snapshot 3% faster than every 1,024 (176-178k against 172k rows/s) and every 65,536 16% slower;
#: streaming measured the same either way
POLL_MASK = 0xFF

#: :meth:`EventProducer.send_all` encodes this many records, then queues them: two tight loops, each keeping its
#: own code and data in the core's caches, cost less than encoding and queueing record by record (the main thread
#: of a 1M-row incremental snapshot: 4.9-5.1 s of CPU against 5.2-5.3 s, 171-175k against 164-166k rows/s in
#: alternating runs; runs of 64 records did about as well, a whole 1,024-row chunk no better). Runs also bound what
#: is held: 256 encoded records of a few kB each.
ENCODE_RUN = 256

#: librdkafka's default ``message.max.bytes``: the largest record (key, value and headers) the producer sends.
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000

#: Delivery reports only for failures: a per-record Python callback costs more than encoding the record.
#: Success is then "flush() left nothing in flight and no failure was reported".
FAST_DELIVERY_REPORTS = {"delivery.report.only.error": True}


def producer_settings(connection_extras: dict[str, Any]) -> dict[str, Any]:
    """librdkafka settings of the producer: defaults, then the Connection's extras, then the required ones."""
    settings = dict(DEFAULT_PRODUCER_SETTINGS)
    settings.update({k: v for k, v in connection_extras.items() if not k.startswith("walflow.")})
    settings.update(FAST_DELIVERY_REPORTS)
    for key, value in REQUIRED_PRODUCER_SETTINGS.items():
        if key in connection_extras and str(connection_extras[key]).lower() != str(value).lower():
            log.warning(
                "Kafka setting %s=%r is overridden with %r: walflow needs it to lose nothing",
                key,
                connection_extras[key],
                value,
            )
        settings[key] = value
    if "bootstrap.servers" not in settings:
        raise DeliveryError(
            "the Kafka connection has no 'bootstrap.servers' in its extras; add it to the Airflow Connection "
            "named by 'walflow.kafka.conn.id'"
        )
    return settings


class EventProducer:
    """An idempotent producer that counts deliveries and remembers the first failure.

    :param reachable_timeout: seconds :meth:`check_reachable` waits for a broker to answer.
    """

    def __init__(
        self,
        settings: dict[str, Any],
        topic_partitions: int = 1,
        topic_replication_factor: int = -1,
        *,
        reachable_timeout: float = 15.0,
    ) -> None:
        self._settings = settings
        self._reachable_timeout = reachable_timeout
        # the delivery callback set once for the producer rather than passed with every record: a quarter less
        # time in each produce() call, which runs for every event
        self._producer = Producer({**settings, "on_delivery": self._on_delivery})
        self._admin_settings = client_settings(settings)
        self._admin: AdminClient | None = None
        self._known_topics: set[str] | None = None
        #: how the connector's topics are created (Kafka Connect's topic creation groups): :func:`use_topic_creation`
        self.topic_creation: TopicCreation | None = None
        self._partitions = topic_partitions
        self._replication = topic_replication_factor
        self.sent = 0
        self.failed = 0
        self.bytes = 0
        self.errors: list[str] = []
        #: the producer's own limit on one record (librdkafka refuses larger ones before sending)
        self.max_record_bytes = int(settings.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))
        #: records the brokers refused as too large: (topic, key, size, the record's source.lsn if it has one)
        self.too_large: list[tuple[str, bytes | None, int, int | None]] = []

    # -- topics -----------------------------------------------------------------------------------
    def ensure_topic(self, topic: str) -> None:
        """Create ``topic`` with the configured partitions if the cluster does not have it yet.

        Brokers that auto-create topics would pick their own partition count; Debezium users set
        ``topic.creation.default.partitions`` to choose it, and so does walflow.
        """
        if self._known_topics is None:
            self._known_topics = set(self._admin_client().list_topics(timeout=30).topics)
        if topic in self._known_topics:
            return
        partitions, replication, configs = (
            self.topic_creation.settings(topic) if self.topic_creation else (self._partitions, self._replication, {})
        )
        futures = self._admin_client().create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=replication, config=configs)],
            operation_timeout=30,
            request_timeout=30,
        )
        try:
            futures[topic].result()
            log.info("created topic %s with %d partition(s)%s", topic, partitions, f" and {configs}" if configs else "")
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise DeliveryError(f"cannot create Kafka topic {topic!r}: {err.str()}") from None
        self._known_topics.add(topic)

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self._admin_settings)
        return self._admin

    def check_reachable(self) -> None:
        """Fail fast, before reading the slot, when no broker answers.

        The producer's own metadata request, not an admin client's: it also starts the idempotent producer's
        request for its producer id at once. Otherwise librdkafka, which asks for the id before any broker
        connection is up, retries on a timer, and the first flush of every batch waited 0.5-1 s for it (measured on
        the embedded broker: 0.5-1.0 s for one record, 0.05 s after this request)."""
        try:
            self._known_topics = set(self._producer.list_topics(timeout=self._reachable_timeout).topics)
        except KafkaException as exc:
            raise DeliveryError(
                f"Kafka at {self._settings.get('bootstrap.servers')!r} is unreachable ({exc.args[0].str()}); "
                "nothing was read from the slot. Check the broker and the Connection named by 'walflow.kafka.conn.id'."
            ) from None

    # -- producing --------------------------------------------------------------------------------
    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:  # only when delivery.report.only.error was turned off
            return
        self.failed += 1
        if err.code() == KafkaError.MSG_SIZE_TOO_LARGE and len(self.too_large) < 10:
            value = msg.value()
            self.too_large.append(
                (msg.topic(), msg.key(), len(value or b"") + len(msg.key() or b""), _source_lsn(value))
            )
        if len(self.errors) < 10:
            self.errors.append(f"{msg.topic()}: {err.str()}")
        else:
            self.errors[-1] = f"... and more ({err.str()})"

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None = None) -> None:
        """Queue one record. :raises RecordTooLargeError: before queueing it, when it exceeds ``message.max.bytes``
        (the caller adds which table, key and position it was)."""
        producer = self._producer
        try:
            if headers is None:
                # without the keyword: confluent-kafka parses keyword arguments on every call, and an explicit
                # headers=None alone made each call a fifth slower (measured: 1.02 -> 1.21 us for a 2.5 kB record)
                producer.produce(topic, value, key)
            else:
                # a list of (name, bytes or null) pairs is one of confluent-kafka's headers; the cast only says so to
                # the type checker, for which a list of narrower pairs is not a list of wider ones (lists are invariant)
                producer.produce(topic, value, key, headers=cast(_KafkaHeaders, headers))
        except (BufferError, KafkaException) as exc:
            self._produce_hard(exc, topic, key, value, headers)
        self.sent += 1
        self.bytes += len(value or b"") + len(key or b"")
        if self.sent & POLL_MASK == 0:
            producer.poll(0)

    def send_all(
        self,
        topic: str,
        items: Iterable[T],
        encode: Callable[[T], tuple[bytes | None, bytes]],
        headers: Headers | None = None,
    ) -> int:
        """Queue one record per item, ``encode(item)`` giving its key and value; return how many.

        :meth:`send` for a run of records, such as a snapshot chunk's rows: up to :data:`ENCODE_RUN` items are
        encoded, then their records queued by :meth:`send_records`. :raises RecordTooLargeError: as :meth:`send`;
        the records before the refused one are queued and counted (``sent`` says how many).
        """
        before = self.sent
        items = iter(items)
        while records := [encode(item) for item in islice(items, ENCODE_RUN)]:
            self.send_records(topic, records, headers)
        return self.sent - before

    def send_records(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes]], headers: Headers | None = None
    ) -> None:
        """Queue each ``(key, value)`` of ``records`` in order, then serve delivery reports.

        :raises RecordTooLargeError: as :meth:`send`; the records before the refused one are queued and counted
            (``sent`` says how many).
        """
        produce = self._producer.produce
        kafka_headers = cast(_KafkaHeaders | None, headers)  # as in send()
        sent = self.sent
        size = 0
        try:
            for key, value in records:
                try:
                    if kafka_headers is None:
                        produce(topic, value, key)
                    else:
                        produce(topic, value, key, headers=kafka_headers)
                except (BufferError, KafkaException) as exc:
                    self._produce_hard(exc, topic, key, value, headers)
                sent += 1
                size += len(value) + (len(key) if key is not None else 0)
        finally:
            self.sent = sent
            self.bytes += size
        self._producer.poll(0)

    def _produce_hard(
        self,
        exc: BufferError | KafkaException,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
    ) -> None:
        """A record ``produce()`` did not take: wait for room in a full queue, or raise why Kafka refuses it."""
        if isinstance(exc, KafkaException):
            self._refused(exc, topic, key, value, headers)
        # The local queue is full: serve delivery reports until there is room. This is what bounds memory,
        # whatever the size of the transaction being streamed.
        producer = self._producer
        while True:
            producer.poll(0.05)
            try:
                producer.produce(topic, value, key, headers=cast(_KafkaHeaders | None, headers))  # as in send()
                return
            except BufferError:
                continue
            except KafkaException as refused:
                self._refused(refused, topic, key, value, headers)

    def _refused(
        self,
        exc: KafkaException,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
    ) -> None:
        err = exc.args[0]
        if err.code() != KafkaError.MSG_SIZE_TOO_LARGE:
            raise DeliveryError(f"Kafka refused a record for topic {topic!r}: {err.str()}") from None
        size = len(value or b"") + len(key or b"") + sum(len(k) + len(v or b"") for k, v in headers or ())
        raise RecordTooLargeError(
            f"a record for topic {topic!r} is {size} bytes, more than the producer's "
            f"message.max.bytes={self.max_record_bytes}",
            topic=topic,
            size=size,
            limit=self.max_record_bytes,
        ) from None

    def serve(self) -> None:
        """Serve the delivery reports that have arrived (without waiting)."""
        self._producer.poll(0)

    def add_sent(self, records: int, size: int) -> None:
        """Count records other processes produced, and saw acknowledged, for the work this producer reports on
        (the snapshot's reader processes), so that records and bytes in summaries cover them."""
        self.sent += records
        self.bytes += size

    @property
    def settings(self) -> dict[str, Any]:
        """The librdkafka settings this producer was made with (another process's producer uses the same)."""
        return dict(self._settings)

    @property
    def partitions(self) -> int:
        return self._partitions

    @property
    def in_flight(self) -> int:
        """Records produced but neither acknowledged nor failed yet."""
        return len(self._producer)

    @property
    def acked(self) -> int:
        return self.sent - self.failed - self.in_flight

    def flush(self, timeout: float) -> None:
        """Wait for every delivery report; raise :class:`DeliveryError` unless all records were acknowledged."""
        remaining = self._producer.flush(timeout)
        if self.too_large:
            topic, key, size, lsn = self.too_large[0]
            where = f" at LSN {_lsn_text(lsn)}" if lsn is not None else ""
            raise RecordTooLargeError(
                f"the brokers refused {len(self.too_large)} record(s) as too large: the first for topic {topic!r}, key "
                f"{_preview(key)}{where}, {size} bytes (before compression), above the topic's max.message.bytes or "
                f"the brokers' message.max.bytes. {OVERSIZE_FIX} The replication slot was not advanced past it."
            )
        if remaining or self.failed:
            detail = (
                "; ".join(self.errors)
                if self.errors
                else f"{remaining} record(s) still unacknowledged after {timeout:.0f} s"
            )
            raise DeliveryError(
                f"Kafka acknowledged {self.acked} of {self.sent} record(s): {detail}. The replication slot was not "
                "advanced past unacknowledged changes; the next run delivers them again."
            )

    def close(self) -> None:
        # Drop what is queued: nothing unacknowledged is ever confirmed to the slot, so losing it is safe.
        self._producer.purge()
        self._producer.flush(1)


#: How to get past a record too large for Kafka, quoted by every error that reports one.
OVERSIZE_FIX = (
    "Fix without losing anything: raise 'message.max.bytes' in the extras of the Kafka Connection (the producer's "
    "limit) and the topic's 'max.message.bytes' on the brokers (kafka-configs --alter --entity-type topics "
    "--add-config max.message.bytes=<n>), and the consumers' fetch limits; or, changing what is captured, cut the "
    "column with 'column.truncate.to.<n>.chars' (character columns) or leave it out with 'column.exclude.list'. "
    "See docs/operations.md, 'Oversized records'."
)


def too_large(
    exc: RecordTooLargeError, *, table: str, key: Any, lsn: int | None, row: dict[str, Any] | None, what: str
) -> RecordTooLargeError:
    """``exc`` (raised by :meth:`EventProducer.send`) with the table, key, position and largest column of the record.

    :param what: what happens to the work around it ("nothing from its transaction on was confirmed", ...).
    """
    where = f" at LSN {_lsn_text(lsn)}" if lsn is not None else ""
    column = ""
    if row:
        name, size = max(((k, len(orjson.dumps(v))) for k, v in row.items()), key=lambda item: item[1])
        column = f"; its largest column is {name!r} ({size} bytes as JSON)"
    key_text = _preview(orjson.dumps(key)) if key is not None else "null"
    return RecordTooLargeError(
        f"the change event of table {table}, key {key_text}{where}, is {exc.size} bytes: more than the producer's "
        f"message.max.bytes={exc.limit} (topic {exc.topic!r}; the brokers also cap records with message.max.bytes and "
        f"the topic's max.message.bytes, 1048588 by default){column}. {what}. {OVERSIZE_FIX}",
        topic=exc.topic,
        size=exc.size,
        limit=exc.limit,
    )


def _preview(key: bytes | None, limit: int = 200) -> str:
    """A record key for an error message: its text, cut to ``limit`` characters."""
    if key is None:
        return "null"
    text = key.decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _source_lsn(value: bytes | None) -> int | None:
    """``source.lsn`` of a change event's value, for reporting a refused record (error path only)."""
    if not value:
        return None
    try:
        doc = orjson.loads(value)
    except ValueError:
        return None
    payload = doc.get("payload", doc) if isinstance(doc, dict) else None
    source = payload.get("source") if isinstance(payload, dict) else None
    lsn = source.get("lsn") if isinstance(source, dict) else None
    return lsn if isinstance(lsn, int) else None


def _lsn_text(lsn: int) -> str:
    """:class:`walflow.source.lsn.Lsn`'s text, written out: the lake's executors ship this module without
    ``walflow.source`` (``tests/unit``'s executor-zip test)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


_ADMIN_KEYS = {"bootstrap.servers", "security.protocol", "client.id", "socket.timeout.ms", "socket.keepalive.enable"}


#: Consumers that read a few records: the broker answers a fetch with nothing new after ``fetch.wait.max.ms``
#: (500 ms by default), so the end of a partition shows sooner with a short wait.
SMALL_READS: dict[str, Any] = {
    "fetch.wait.max.ms": 10,
    "fetch.max.bytes": 1024 * 1024,
    "max.partition.fetch.bytes": 1024 * 1024,
}


class TopicCreation:
    """Kafka Connect's topic creation: the first group whose ``include`` matches a topic (and whose ``exclude`` does
    not) gives its partitions, replication factor and settings; what a group leaves out, and topics no group takes,
    come from the ``default`` group (``topic.creation.default.*``). The patterns are Java's: whole names, case
    sensitive."""

    def __init__(self, config: Any) -> None:
        # imported here: this module also runs on the lake job's executors, which need nothing of topic creation;
        # Kafka Connect compiles the groups' patterns with Java
        from walflow.config.javaregex import compile_java

        creation = config.topic_creation or {}
        self.partitions = config.topic_creation_default_partitions
        self.replication = config.topic_creation_default_replication_factor
        self.default = dict(creation.get("default") or {})
        self.groups = [
            (
                [compile_java(p, 0, "topic.creation include") for p in group["include"]],
                [compile_java(p, 0, "topic.creation exclude") for p in group["exclude"]],
                group,
            )
            for group in creation.get("groups") or []
        ]

    def settings(self, topic: str) -> tuple[int, int, dict[str, str]]:
        """(partitions, replication factor, topic settings) of a new topic."""
        for include, exclude, group in self.groups:
            if any(p.fullmatch(topic) for p in include) and not any(p.fullmatch(topic) for p in exclude):
                return (
                    group["partitions"] if group["partitions"] is not None else self.partitions,
                    group["replication_factor"] if group["replication_factor"] is not None else self.replication,
                    {**self.default, **group["configs"]},
                )
        return self.partitions, self.replication, dict(self.default)


def use_topic_creation(producer: Any, config: Any) -> None:
    """Have ``producer`` create the connector's topics as its topic creation keys say (a transforming producer's
    inner one too)."""
    target = getattr(producer, "inner", producer)
    if isinstance(target, EventProducer):
        target.topic_creation = TopicCreation(config)


def client_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings of a producer's that any other client of the same cluster needs: the brokers, the security."""
    return {k: v for k, v in settings.items() if k in _ADMIN_KEYS or k.startswith(("ssl.", "sasl."))}


def consumer(kafka: dict[str, Any], **overrides: Any) -> Consumer:
    """A consumer that commits nothing (the lake keeps its offsets in Iceberg) and reports partition EOF."""
    settings: dict[str, Any] = {
        "group.id": f"walflow-apply-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }
    settings.update(overrides)
    settings.update({k: v for k, v in kafka.items() if not k.startswith("walflow.")})
    return Consumer(settings)


def list_topics(kafka: dict[str, Any], timeout: float = 30.0) -> dict[str, list[int]]:
    """Every topic of the cluster without error, with its partitions."""
    client = consumer(kafka)
    try:
        metadata = client.list_topics(timeout=timeout)
    finally:
        client.close()
    return {name: sorted(meta.partitions) for name, meta in metadata.topics.items() if meta.error is None}


def consumed_offset(offset: int | None, topic: str, partition: int) -> int:
    """The offset of a record a consumer returned: librdkafka gives every one its offset (the type allows none)."""
    if offset is None:
        raise LakeError(f"{topic}[{partition}]: the broker returned a record without an offset")
    return offset


def partition_end(client: Consumer, topic: str, partition: int, start: int, timeout: float = 30.0) -> int:
    """A partition's end offset, found by consuming to EOF with ``client`` (``enable.partition.eof`` set).

    ListOffsets can be short by the last batch on some Kafka-compatible brokers (the embedded one among them), so it
    only gives where to begin reading: one record before it, or ``start`` when that is further.
    """
    _low, high = client.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
    begin = max(0, min(high, max(start, high - 1)))
    client.assign([TopicPartition(topic, partition, begin)])
    end = begin
    while True:
        msg = client.poll(timeout)
        if msg is None:
            raise BrokerUnavailableError(
                f"no end of partition from {topic}[{partition}] within {timeout:.0f} s: is the broker reachable?"
            )
        error = msg.error()
        offset = msg.offset()
        if error:
            if error.code() == KafkaError._PARTITION_EOF:
                return max(end, offset) if offset is not None and offset >= 0 else end
            raise LakeError(f"{topic}[{partition}]: {error.str()}")
        end = consumed_offset(offset, topic, partition) + 1


def topic_ends(kafka: dict[str, Any], topics: list[str], timeout: float = 30.0) -> dict[str, dict[int, int]]:
    """The end offset of every partition of ``topics`` (a topic that does not exist yet has none). ``kafka`` may be a
    producer's settings: only what reaches and authenticates to the cluster is taken from them. ``timeout`` bounds
    each request to the cluster."""
    kafka = {
        k: v
        for k, v in kafka.items()
        if k.startswith(("bootstrap.", "security.", "sasl.", "ssl.", "client.", "socket."))
    }
    found = list_topics(kafka, timeout)
    ends: dict[str, dict[int, int]] = {}
    client = consumer(kafka, **SMALL_READS)
    try:
        for topic in topics:
            ends[topic] = {p: partition_end(client, topic, p, 0, timeout) for p in found.get(topic, [])}
    finally:
        client.close()
    return ends
