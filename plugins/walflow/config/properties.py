"""Debezium 3.6's documented PostgreSQL connector properties, and what walflow does with each.

:data:`DEBEZIUM_PROPERTIES` is the property table of Debezium 3.6's PostgreSQL connector page, in its order (112
keys; the page's ``_length_``-style placeholders are written as the page writes them). :func:`status` reads each
key's fate from the configuration model itself (the fields of :class:`~walflow.config.connector.ConnectorConfig`,
its aliases and patterned keys, and the keys it refuses or accepts without effect), so the README's table, which
:func:`markdown_table` writes and ``tests/unit/test_config.py`` holds to the model, cannot drift from what
:func:`~walflow.config.connector.parse_config` does.
"""

from __future__ import annotations

from walflow.config.connector import (
    ALIASES,
    CONNECTION_KEYS,
    KNOWN_KEYS,
    NO_EFFECT_KEYS,
    UNSUPPORTED_KEYS,
    is_patterned_key,
)

DEBEZIUM_PROPERTIES = (
    "name",
    "connector.class",
    "tasks.max",
    "plugin.name",
    "slot.name",
    "slot.drop.on.stop",
    "slot.failover",
    "offset.mismatch.strategy",
    "publication.name",
    "database.hostname",
    "database.port",
    "database.user",
    "database.password",
    "database.dbname",
    "database.connection.factory.class",
    "topic.prefix",
    "schema.include.list",
    "schema.exclude.list",
    "table.include.list",
    "table.exclude.list",
    "column.include.list",
    "column.exclude.list",
    "skip.messages.without.change",
    "time.precision.mode",
    "decimal.handling.mode",
    "hstore.handling.mode",
    "interval.handling.mode",
    "database.sslmode",
    "database.sslcert",
    "database.sslkey",
    "database.sslpassword",
    "database.sslrootcert",
    "database.sslfactory",
    "database.tcpKeepAlive",
    "tombstones.on.delete",
    "column.truncate.to._length_.chars",
    "column.mask.with._length_.chars",
    "column.mask.hash._hashAlgorithm_.with.salt._salt_",
    "column.propagate.source.type",
    "datatype.propagate.source.type",
    "message.key.columns",
    "publication.autocreate.mode",
    "replica.identity.autoset.values",
    "binary.handling.mode",
    "schema.name.adjustment.mode",
    "field.name.adjustment.mode",
    "money.fraction.digits",
    "message.prefix.include.list",
    "message.prefix.exclude.list",
    "converters",
    "snapshot.isolation.mode",
    "snapshot.mode",
    "snapshot.mode.configuration.based.snapshot.data",
    "snapshot.mode.configuration.based.snapshot.schema",
    "snapshot.mode.configuration.based.start.stream",
    "snapshot.mode.configuration.based.snapshot.on.schema.error",
    "snapshot.mode.configuration.based.snapshot.on.data.error",
    "snapshot.mode.custom.name",
    "snapshot.locking.mode",
    "snapshot.locking.mode.custom.name",
    "snapshot.query.mode",
    "snapshot.query.mode.custom.name",
    "snapshot.include.collection.list",
    "snapshot.lock.timeout.ms",
    "snapshot.select.statement.overrides",
    "event.processing.failure.handling.mode",
    "max.batch.size",
    "max.queue.size",
    "max.queue.size.in.bytes",
    "poll.interval.ms",
    "include.unknown.datatypes",
    "database.initial.statements",
    "status.update.interval.ms",
    "heartbeat.interval.ms",
    "heartbeat.action.query",
    "schema.refresh.mode",
    "snapshot.delay.ms",
    "statistics.metrics.enabled",
    "streaming.delay.ms",
    "snapshot.fetch.size",
    "slot.stream.params",
    "slot.max.retries",
    "slot.retry.delay.ms",
    "unavailable.value.placeholder",
    "provide.transaction.metadata",
    "publish.via.partition.root",
    "flush.lsn.source",
    "lsn.flush.mode",
    "retriable.restart.connector.wait.ms",
    "skipped.operations",
    "signal.data.collection",
    "signal.enabled.channels",
    "notification.enabled.channels",
    "incremental.snapshot.chunk.size",
    "incremental.snapshot.watermarking.strategy",
    "read.only",
    "xmin.fetch.interval.ms",
    "topic.naming.strategy",
    "topic.delimiter",
    "topic.cache.size",
    "topic.heartbeat.prefix",
    "topic.heartbeat.name",
    "topic.transaction",
    "snapshot.max.threads",
    "legacy.snapshot.max.threads",
    "custom.metric.tags",
    "custom.sanitize.pattern",
    "errors.max.retries",
    "database.query.timeout.ms",
    "guardrail.collections.max",
    "guardrail.collections.limit.action",
    "extended.headers.enabled",
)

#: a placeholder key of the page, written as a user writes it
_SAMPLES = {
    "column.mask.hash._hashAlgorithm_.with.salt._salt_": "column.mask.hash.SHA-256.with.salt.pepper",
    "column.mask.with._length_.chars": "column.mask.with.4.chars",
    "column.truncate.to._length_.chars": "column.truncate.to.5.chars",
}

#: what walflow honours of a key beyond Debezium's meaning (values it refuses, with the reason)
NOTES = {
    "slot.drop.on.stop": (
        "false only (the default): a walflow connector stops after every batch and its slot must outlive it; "
        "`walflow reset` retires a connector (its slot and state)"
    ),
    "replica.identity.autoset.values": (
        "setup gives the captured tables that match the identity named (ALTER TABLE ... REPLICA IDENTITY), as "
        "Debezium does at start; the connector's role must own them"
    ),
    "max.batch.size": "librdkafka's batch.num.messages",
    "max.queue.size": "librdkafka's queue.buffering.max.messages",
    "max.queue.size.in.bytes": "librdkafka's queue.buffering.max.kbytes (0, the default: no bound in bytes)",
    "poll.interval.ms": (
        "how often the stream DAG's WAL sensor looks, unless walflow.stream.trigger.poke.seconds is set"
    ),
    "custom.metric.tags": (
        "tags of the connector's Airflow gauges (StatsD with Airflow's statsd_influxdb_enabled, OpenTelemetry)"
    ),
    "plugin.name": "pgoutput only: the one plugin every PostgreSQL ships",
    "tasks.max": "1: one stream task reads the slot, as with Debezium's PostgreSQL connector",
    "snapshot.mode": (
        "all but custom (Java classes); configuration_based where another mode does the same (as always, or as no_data)"
    ),
    "snapshot.mode.configuration.based.snapshot.data": (
        "with start.stream: a snapshot at every start (snapshot.mode always)"
    ),
    "snapshot.mode.configuration.based.start.stream": "alone: streaming without a snapshot (snapshot.mode no_data)",
    "snapshot.mode.configuration.based.snapshot.schema": "PostgreSQL keeps no schema history: nothing to snapshot",
    "snapshot.mode.configuration.based.snapshot.on.schema.error": "PostgreSQL keeps no schema history: no schema error",
    "snapshot.mode.configuration.based.snapshot.on.data.error": (
        "false; true is refused unless snapshot.data is set (use when_needed)"
    ),
    "snapshot.isolation.mode": (
        "serializable and repeatable_read read the slot's exported snapshot, one consistent view; read_committed and "
        "read_uncommitted are refused (a snapshot must read one view)"
    ),
    "snapshot.locking.mode": "none (the default) and shared; custom is a Java class",
    "snapshot.query.mode": "select_all; custom is a Java class",
    "topic.naming.strategy": "SchemaTopicNamingStrategy and DefaultTopicNamingStrategy (the same names for PostgreSQL)",
    "lsn.flush.mode": (
        "connector: walflow confirms a position only after Kafka acknowledged it; manual would let the slot hold WAL "
        "forever"
    ),
    "flush.lsn.source": "true (lsn.flush.mode connector)",
    "event.processing.failure.handling.mode": (
        "fail stops the batch before the slot moves, naming the table, column, value and position; warn and skip "
        "(ignore as skip) leave the event out as Debezium does, counted on walflow's status and recorded in the lake "
        "table (docs/operations.md)"
    ),
    "signal.enabled.channels": (
        "source (the signal table) and kafka (signal.kafka.topic, by default <topic.prefix>-signal, read at each "
        "batch's start); the file and jmx channels are refused (not supported yet)"
    ),
    "unavailable.value.placeholder": "as toasted.value.placeholder",
    "read.only": (
        "no write to the source: incremental snapshots' windows from the chunk's snapshot and WAL position, signals "
        "from the signal table or Kafka, state in walflow.state.conn.id; a hot standby (PostgreSQL 16+) can be the "
        "source"
    ),
    "slot.failover": (
        "PostgreSQL 17+: the slot is created with failover, and standbys with sync_replication_slots keep a copy that "
        "a promoted standby streams from (docs/operations.md)"
    ),
}

HONOURED, NO_EFFECT, REFUSED, CONNECTION, UNKNOWN = (
    "honoured",
    "accepted, no effect",
    "refused",
    "from the Connection",
    "unknown",
)


def status(key: str) -> tuple[str, str]:
    """What walflow does with Debezium's ``key``: one of :data:`HONOURED`, :data:`NO_EFFECT`, :data:`REFUSED`,
    :data:`CONNECTION` (refused in the file: the Airflow Connection carries it) or :data:`UNKNOWN`, and why."""
    sample = _SAMPLES.get(key, key)
    if sample in CONNECTION_KEYS:
        return CONNECTION, f"{CONNECTION_KEYS[sample]} of the Connection named by walflow.postgres.conn.id"
    if sample in UNSUPPORTED_KEYS:
        return REFUSED, UNSUPPORTED_KEYS[sample]
    if sample in NO_EFFECT_KEYS:
        return NO_EFFECT, NO_EFFECT_KEYS[sample]
    if ALIASES.get(sample, sample) in KNOWN_KEYS or is_patterned_key(sample):
        return HONOURED, NOTES.get(key, "")
    return UNKNOWN, ""


def counts() -> dict[str, int]:
    out: dict[str, int] = {}
    for key in DEBEZIUM_PROPERTIES:
        kind = status(key)[0]
        out[kind] = out.get(kind, 0) + 1
    return out


def markdown_table() -> str:
    """The README's table of Debezium's properties (see the module's docstring)."""
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts().items(), key=lambda item: -item[1]))
    lines = [
        f"{len(DEBEZIUM_PROPERTIES)} properties: {summary}.",
        "",
        "| property | walflow | notes |",
        "|---|---|---|",
    ]
    for key in DEBEZIUM_PROPERTIES:
        kind, note = status(key)
        lines.append(f"| `{key}` | {kind} | {note.replace('|', '/')} |")
    return "\n".join(lines)
