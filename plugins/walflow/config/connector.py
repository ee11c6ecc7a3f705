"""Connector configuration: Debezium's property names, Debezium's defaults, validated up front.

A connector is one YAML file of flat, dotted keys (``slot.name: inventory``), exactly as a Debezium user
would write them in a Kafka Connect request, plus walflow's own ``walflow.*`` keys. Everything is checked
here, before any database is touched: an unknown key, a wrong type, an enum value that is not allowed or a
conflicting pair raises :class:`~walflow.errors.ConfigError` naming the key, the value and what is allowed.

Credentials never live in this file: the source database comes from the Airflow Connection named by
``walflow.postgres.conn.id`` and Kafka from the one named by ``walflow.kafka.conn.id``.
"""

from __future__ import annotations

import re
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from walflow.config.patterns import Pattern
from walflow.config.smt_chain import (
    PostProcessorSpec,
    TransformSpec,
    is_chain_key,
    parse_chain,
    parse_post_processors,
    post_processor_aliases,
)
from walflow.config.topics import parse_topic_creation
from walflow.config.values import split_list as _split_list
from walflow.errors import ConfigError, PatternError

#: Debezium keys that name credentials or the server address: in walflow these come from Connections.
CONNECTION_KEYS = {
    "database.hostname": "the host",
    "database.port": "the port",
    "database.user": "the login",
    "database.password": "the password",
    "database.dbname": "the schema (database name)",
    "database.sslpassword": "the client key's passphrase (the extra 'sslpassword')",
}

#: Debezium keys walflow knows but deliberately does not implement, with the reason.
UNSUPPORTED_KEYS = {
    "slot.stream.params": "walflow reads the slot through pgoutput with fixed parameters",
    "snapshot.custom.class": "custom snapshotter classes are Java-only",
    "converters": "custom converters are Java classes",
    "database.connection.factory.class": (
        "connection factories are Java classes; walflow connects with libpq, configured by the Connection's extras"
    ),
    "database.sslfactory": (
        "SSL socket factories are Java classes; walflow's TLS is libpq's (database.sslmode, sslcert, sslkey, "
        "sslrootcert)"
    ),
    "snapshot.mode.custom.name": "custom snapshotters are Java classes",
    "snapshot.locking.mode.custom.name": "custom locking modes are Java classes",
    "snapshot.query.mode.custom.name": (
        "custom snapshot queries are Java classes; walflow has snapshot.select.statement.overrides"
    ),
}

#: Debezium keys that govern what walflow does otherwise, accepted and without effect, with the reason.
NO_EFFECT_KEYS = {
    "status.update.interval.ms": "walflow confirms the slot's position once per batch, after Kafka acknowledged it",
    "streaming.delay.ms": "streaming starts with the stream DAG's next run after the setup",
    "statistics.metrics.enabled": "no JMX: each batch's figures are in its task log and XCom",
    "topic.cache.size": "walflow keeps each table's topic name with its schema",
    "xmin.fetch.interval.ms": (
        "walflow does not track the slot's xmin: source.xmin is null, as with Debezium's default 0"
    ),
    "offset.mismatch.strategy": "the slot's confirmed position is walflow's only offset, so there is none to mismatch",
    "schema.refresh.mode": "walflow rebuilds a table's schema from each Relation message pgoutput sends",
    "incremental.snapshot.watermarking.strategy": (
        "walflow's watermarks are logical decoding messages, which leave no rows to delete"
    ),
    "custom.sanitize.pattern": (
        "connector files hold no secrets (credentials come from Airflow Connections), so there is nothing to mask"
    ),
}

#: Other Debezium names of the same setting (older, or in the case of ``unavailable.value.placeholder`` newer),
#: accepted as aliases of the key walflow stores.
ALIASES = {
    "database.server.name": "topic.prefix",
    "unavailable.value.placeholder": "toasted.value.placeholder",
}

#: Debezium 1.x's ``truncate.handling.mode`` (``skip`` | ``include``), folded into ``skipped.operations``.
TRUNCATE_HANDLING_MODE = "truncate.handling.mode"

_TOPIC_PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_SLOT_NAME_RE = re.compile(r"^[a-z0-9_]{1,63}$")
_CONNECTOR_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_IMPORT_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_DYNAMIC_KEY_PATTERNS = (
    re.compile(r"^column\.truncate\.to\.(\d+)\.chars$"),
    re.compile(r"^column\.mask\.with\.(\d+)\.chars$"),
    # column.mask.hash[.v2].<algorithm>.with.salt.<salt>: the algorithm group keeps the "v2." prefix
    re.compile(r"^column\.mask\.hash\.((?:v2\.)?[^.]+(?:-[^.]+)*)\.with\.salt\.(.+)$"),
    re.compile(r"^snapshot\.select\.statement\.overrides\.(.+)$"),
    re.compile(r"^signal\.consumer\.(.+)$"),
)


def is_patterned_key(key: str) -> bool:
    """Whether ``key`` is one of Debezium's keys with a part the user chooses (``column.truncate.to.<n>.chars``...)."""
    return any(pattern.match(key) for pattern in _DYNAMIC_KEY_PATTERNS)


def _check_patterns(patterns: list[str]) -> None:
    for pattern in patterns:
        try:
            Pattern(pattern, "")
        except PatternError as exc:
            raise ValueError(str(exc).removeprefix(": ")) from None


#: the list settings whose items are regular expressions, each checked when the configuration is read
_PATTERN_LISTS = (
    "schema_include_list",
    "schema_exclude_list",
    "table_include_list",
    "table_exclude_list",
    "column_include_list",
    "column_exclude_list",
    "message_prefix_include_list",
    "message_prefix_exclude_list",
    "snapshot_include_collection_list",
    "column_propagate_source_type",
    "datatype_propagate_source_type",
)


#: Spark settings that hold credentials (Spark's own redaction pattern, and Iceberg's catalog properties): refused in
#: walflow.lake.spark.conf, which reaches the command line; the catalog's Connection carries them instead
_SECRET_SETTING = re.compile(r"(?i)secret|password|token|credential|access[._-]?key|session[._-]?key|private[._-]?key")

#: the channels walflow has, per ``*.enabled.channels`` field, and the message (``{other}``: the ones it lacks)
_CHANNELS = {
    "notification_enabled_channels": (
        ("sink", "log"),
        "walflow sends notifications to a topic ('sink') and the task log ('log'); channel(s) {other} are not "
        "supported (jmx: walflow runs no JVM)",
    ),
    "signal_enabled_channels": (
        ("source", "kafka"),
        "walflow reads signals from the signal table ('source') and a Kafka topic ('kafka'); channel(s) {other} are "
        "not supported yet",
    ),
}


class ConnectorConfig(BaseModel):
    """A validated connector configuration.

    Attribute names are the Debezium keys in snake case; :meth:`get` takes the dotted key itself.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    # -- identity ------------------------------------------------------------------------------
    name: str = Field(alias="name")
    connector_class: Literal["io.debezium.connector.postgresql.PostgresConnector"] = Field(
        "io.debezium.connector.postgresql.PostgresConnector", alias="connector.class"
    )
    tasks_max: Literal[1] = Field(1, alias="tasks.max")
    #: Kafka Connect's converters: walflow writes what the JSON converter writes (its schemas.enable keys below)
    key_converter: Literal["org.apache.kafka.connect.json.JsonConverter"] = Field(
        "org.apache.kafka.connect.json.JsonConverter", alias="key.converter"
    )
    value_converter: Literal["org.apache.kafka.connect.json.JsonConverter"] = Field(
        "org.apache.kafka.connect.json.JsonConverter", alias="value.converter"
    )
    topic_prefix: str = Field(alias="topic.prefix")

    # -- source server -------------------------------------------------------------------------
    plugin_name: Literal["pgoutput"] = Field("pgoutput", alias="plugin.name")
    slot_name: str = Field("debezium", alias="slot.name")
    publication_name: str = Field("dbz_publication", alias="publication.name")
    publication_autocreate_mode: Literal["all_tables", "disabled", "filtered"] = Field(
        "all_tables", alias="publication.autocreate.mode"
    )
    #: the publication publishes a partition's changes as its partitioned table's (root's), on the root's topic
    publish_via_partition_root: bool = Field(False, alias="publish.via.partition.root")
    database_sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None = Field(
        None, alias="database.sslmode"
    )
    database_sslcert: str | None = Field(None, alias="database.sslcert")
    database_sslkey: str | None = Field(None, alias="database.sslkey")
    database_sslrootcert: str | None = Field(None, alias="database.sslrootcert")
    database_tcp_keepalive: bool = Field(True, alias="database.tcpKeepAlive")
    database_initial_statements: str | None = Field(None, alias="database.initial.statements")
    #: statement timeout of the queries that read tables (snapshot chunks, signal checks); 0 turns it off
    database_query_timeout_ms: int = Field(600_000, ge=0, alias="database.query.timeout.ms")

    # -- what is captured ----------------------------------------------------------------------
    schema_include_list: list[str] = Field(default_factory=list, alias="schema.include.list")
    schema_exclude_list: list[str] = Field(default_factory=list, alias="schema.exclude.list")
    table_include_list: list[str] = Field(default_factory=list, alias="table.include.list")
    table_exclude_list: list[str] = Field(default_factory=list, alias="table.exclude.list")
    column_include_list: list[str] = Field(default_factory=list, alias="column.include.list")
    column_exclude_list: list[str] = Field(default_factory=list, alias="column.exclude.list")
    message_key_columns: str | None = Field(None, alias="message.key.columns")
    skipped_operations: list[str] = Field(default_factory=lambda: ["t"], alias="skipped.operations")
    message_prefix_include_list: list[str] = Field(default_factory=list, alias="message.prefix.include.list")
    message_prefix_exclude_list: list[str] = Field(default_factory=list, alias="message.prefix.exclude.list")

    # -- event shape ---------------------------------------------------------------------------
    tombstones_on_delete: bool = Field(True, alias="tombstones.on.delete")
    #: an update none of whose captured columns changed is not emitted; seen only where the update carries the old
    #: row (REPLICA IDENTITY FULL), as in Debezium
    skip_messages_without_change: bool = Field(False, alias="skip.messages.without.change")
    provide_transaction_metadata: bool = Field(False, alias="provide.transaction.metadata")
    #: the ``__debezium.context.*`` headers on every change event
    extended_headers_enabled: bool = Field(True, alias="extended.headers.enabled")
    #: the data topics' names: ``<prefix>.<schema>.<table>`` under either strategy for PostgreSQL
    topic_naming_strategy: Literal[
        "io.debezium.schema.SchemaTopicNamingStrategy", "io.debezium.schema.DefaultTopicNamingStrategy"
    ] = Field("io.debezium.schema.SchemaTopicNamingStrategy", alias="topic.naming.strategy")
    #: the heartbeat topic's full name (none: topic.heartbeat.prefix, the delimiter and topic.prefix)
    topic_heartbeat_name: str | None = Field(None, alias="topic.heartbeat.name")
    #: the slot's position is confirmed by walflow only, once Kafka acknowledged the batch
    lsn_flush_mode: Literal["connector"] = Field("connector", alias="lsn.flush.mode")
    flush_lsn_source: Literal[True] = Field(True, alias="flush.lsn.source")
    #: an event that cannot be built (a value its schema cannot carry): ``fail`` stops the batch, naming the table,
    #: column, value and position; ``warn`` leaves the event out with a warning naming them, ``skip`` (and
    #: ``ignore``, which Debezium handles as ``skip``) without one. Left-out events are counted on walflow's status
    #: and recorded in the lake table (walflow.capture.failures).
    event_processing_failure_handling_mode: Literal["fail", "warn", "skip", "ignore"] = Field(
        "fail", alias="event.processing.failure.handling.mode"
    )
    #: a value its converter cannot represent (NaN or an infinity in a precise decimal): ``warn`` (Debezium's
    #: default) and ``skip`` make it null where the column is nullable; ``fail``, and a NOT NULL column whatever
    #: the mode, make the whole event fail (event.processing.failure.handling.mode then decides)
    event_converting_failure_handling_mode: Literal["fail", "warn", "skip"] = Field(
        "warn", alias="event.converting.failure.handling.mode"
    )
    #: where signals come from: the signal table (``source``: signal.data.collection) and a Kafka topic (``kafka``)
    signal_enabled_channels: list[str] = Field(default_factory=lambda: ["source"], alias="signal.enabled.channels")
    #: where snapshots' progress is told (walflow.capture.notifications): ``sink`` (a topic), ``log`` (the task log)
    notification_enabled_channels: list[str] = Field(default_factory=list, alias="notification.enabled.channels")
    notification_sink_topic_name: str | None = Field(None, alias="notification.sink.topic.name")
    #: the Kafka signal channel's topic (none: ``<topic.prefix>-signal``), its brokers (none: the Kafka Connection's)
    signal_kafka_topic: str | None = Field(None, alias="signal.kafka.topic")
    signal_kafka_bootstrap_servers: str | None = Field(None, alias="signal.kafka.bootstrap.servers")
    signal_kafka_group_id: str = Field("kafka-signal", alias="signal.kafka.groupId")
    signal_kafka_poll_timeout_ms: int = Field(100, ge=0, alias="signal.kafka.poll.timeout.ms")
    #: at most this many captured tables (0: no limit); more warn or fail as guardrail.collections.limit.action says
    guardrail_collections_max: int = Field(0, ge=0, alias="guardrail.collections.max")
    guardrail_collections_limit_action: Literal["warn", "fail"] = Field(
        "warn", alias="guardrail.collections.limit.action"
    )
    topic_transaction: str = Field("transaction", alias="topic.transaction")
    topic_delimiter: str = Field(".", alias="topic.delimiter")
    topic_heartbeat_prefix: str = Field("__debezium-heartbeat", alias="topic.heartbeat.prefix")
    key_converter_schemas_enable: bool = Field(True, alias="key.converter.schemas.enable")
    value_converter_schemas_enable: bool = Field(True, alias="value.converter.schemas.enable")
    #: Kafka's JsonConverter writes a null field that has a default as the default (KIP-581, on by default); none:
    #: as Kafka with the lake off, off with the lake on (the lake must hold the source's NULL)
    value_converter_replace_null_with_default: bool | None = Field(
        None, alias="value.converter.replace.null.with.default"
    )
    decimal_handling_mode: Literal["precise", "double", "string"] = Field("precise", alias="decimal.handling.mode")
    time_precision_mode: Literal["adaptive", "adaptive_time_microseconds", "connect"] = Field(
        "adaptive", alias="time.precision.mode"
    )
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = Field(
        "bytes", alias="binary.handling.mode"
    )
    interval_handling_mode: Literal["numeric", "string"] = Field("numeric", alias="interval.handling.mode")
    hstore_handling_mode: Literal["json", "map"] = Field("json", alias="hstore.handling.mode")
    include_unknown_datatypes: bool = Field(False, alias="include.unknown.datatypes")
    #: scale of a ``money`` value as a precise decimal (Debezium's ``money.fraction.digits``); no effect in the
    #: ``double`` and ``string`` decimal modes
    money_fraction_digits: int = Field(2, ge=0, alias="money.fraction.digits")
    toasted_value_placeholder: str = Field("__debezium_unavailable_value", alias="toasted.value.placeholder")
    # Debezium 1.x's switch, which 3.x no longer reads (field.name.adjustment.mode replaced it): accepted, no effect
    sanitize_field_names: bool = Field(False, alias="sanitize.field.names")
    schema_name_adjustment_mode: Literal["none", "avro", "avro_unicode"] = Field(
        "none", alias="schema.name.adjustment.mode"
    )
    field_name_adjustment_mode: Literal["none", "avro", "avro_unicode"] = Field(
        "none", alias="field.name.adjustment.mode"
    )
    column_propagate_source_type: list[str] = Field(default_factory=list, alias="column.propagate.source.type")
    datatype_propagate_source_type: list[str] = Field(default_factory=list, alias="datatype.propagate.source.type")

    # -- heartbeats ----------------------------------------------------------------------------
    heartbeat_interval_ms: int = Field(0, ge=0, alias="heartbeat.interval.ms")
    heartbeat_action_query: str | None = Field(None, alias="heartbeat.action.query")

    # -- retries -------------------------------------------------------------------------------
    #: the stream task's retries after an error that may pass (Airflow's ``retries``; -1, Debezium's "no limit",
    #: becomes 1000); none: walflow's 2
    errors_max_retries: int | None = Field(None, ge=-1, alias="errors.max.retries")
    #: the wait before such a retry (Airflow's ``retry_delay``); none: walflow's 30 s
    retriable_restart_connector_wait_ms: int | None = Field(None, ge=0, alias="retriable.restart.connector.wait.ms")
    #: how many more times a batch tries a slot another process is using, and how long it waits between tries;
    #: none: it fails at once (the next scheduled run tries again)
    slot_max_retries: int | None = Field(None, ge=0, alias="slot.max.retries")
    slot_retry_delay_ms: int = Field(10_000, ge=0, alias="slot.retry.delay.ms")

    # -- snapshots -----------------------------------------------------------------------------
    snapshot_mode: Literal[
        "initial", "always", "never", "initial_only", "when_needed", "no_data", "configuration_based"
    ] = Field("initial", alias="snapshot.mode")
    #: ``snapshot.mode: configuration_based`` and its flags: read as the mode that does the same
    #: (:meth:`_configuration_based`)
    snapshot_mode_configuration_based_snapshot_data: bool = Field(
        False, alias="snapshot.mode.configuration.based.snapshot.data"
    )
    snapshot_mode_configuration_based_snapshot_schema: bool = Field(
        False, alias="snapshot.mode.configuration.based.snapshot.schema"
    )
    snapshot_mode_configuration_based_start_stream: bool = Field(
        False, alias="snapshot.mode.configuration.based.start.stream"
    )
    snapshot_mode_configuration_based_snapshot_on_schema_error: bool = Field(
        False, alias="snapshot.mode.configuration.based.snapshot.on.schema.error"
    )
    snapshot_mode_configuration_based_snapshot_on_data_error: bool = Field(
        False, alias="snapshot.mode.configuration.based.snapshot.on.data.error"
    )
    snapshot_include_collection_list: list[str] = Field(default_factory=list, alias="snapshot.include.collection.list")
    snapshot_select_statement_overrides: list[str] = Field(
        default_factory=list, alias="snapshot.select.statement.overrides"
    )
    snapshot_lock_timeout_ms: int = Field(10000, ge=0, alias="snapshot.lock.timeout.ms")
    #: ``shared`` takes ACCESS SHARE locks on the tables while their definitions are read, which keeps DDL out;
    #: ``none`` (Debezium's default) takes none: the rows come from the slot's exported snapshot either way
    snapshot_locking_mode: Literal["none", "shared"] = Field("none", alias="snapshot.locking.mode")
    #: the snapshot reads the slot's exported snapshot under REPEATABLE READ in both modes: one consistent view
    snapshot_isolation_mode: Literal["serializable", "repeatable_read"] = Field(
        "serializable", alias="snapshot.isolation.mode"
    )
    snapshot_query_mode: Literal["select_all"] = Field("select_all", alias="snapshot.query.mode")
    #: Debezium sorts the tables by their row counts, which its PostgreSQL connector does not read (every table
    #: counts 0, the order stays): the same here
    snapshot_tables_order_by_row_count: Literal["disabled", "ascending", "descending"] = Field(
        "disabled", alias="snapshot.tables.order.by.row.count"
    )
    #: PostgreSQL's own tables (pg_catalog, information_schema, TOAST and temporary schemas) are never captured
    table_ignore_builtin: Literal[True] = Field(True, alias="table.ignore.builtin")
    snapshot_delay_ms: int = Field(0, ge=0, alias="snapshot.delay.ms")
    snapshot_fetch_size: int = Field(10240, gt=0, alias="snapshot.fetch.size")
    snapshot_max_threads: int = Field(1, ge=1, le=64, alias="snapshot.max.threads")
    incremental_snapshot_chunk_size: int = Field(1024, gt=0, alias="incremental.snapshot.chunk.size")
    #: false, Debezium's default: a table altered while its incremental snapshot runs is read with the definition
    #: planned when the snapshot reached it; true: its definition is checked before each chunk, and a chunk after a
    #: change is read with the columns the table has then (walflow.capture.incremental.selection)
    incremental_snapshot_allow_schema_changes: bool = Field(False, alias="incremental.snapshot.allow.schema.changes")
    signal_data_collection: str | None = Field(None, alias="signal.data.collection")

    # -- topics created by walflow -------------------------------------------------------------
    topic_creation_default_partitions: int = Field(1, ge=1, alias="topic.creation.default.partitions")
    topic_creation_default_replication_factor: int = Field(-1, alias="topic.creation.default.replication.factor")

    # -- walflow's own keys --------------------------------------------------------------------
    walflow_postgres_conn_id: str = Field("postgres_default", alias="walflow.postgres.conn.id")
    #: the Connection of the role that evaluates signals' conditions (none: signals with a condition fail)
    walflow_postgres_reader_conn_id: str | None = Field(None, alias="walflow.postgres.reader.conn.id")
    walflow_kafka_conn_id: str = Field("kafka_default", alias="walflow.kafka.conn.id")
    walflow_schedule: str | None = Field("*/5 * * * *", alias="walflow.schedule")
    walflow_batch_max_events: int = Field(1_000_000, gt=0, alias="walflow.batch.max.events")
    walflow_batch_max_seconds: float = Field(300.0, gt=0, alias="walflow.batch.max.seconds")
    walflow_kafka_flush_timeout_s: float = Field(60.0, gt=0, alias="walflow.kafka.flush.timeout.seconds")
    walflow_slot_max_retained_wal_bytes: int = Field(1 << 30, gt=0, alias="walflow.slot.max.retained.wal.bytes")
    walflow_slot_fail_retained_wal_bytes: int | None = Field(None, gt=0, alias="walflow.slot.fail.retained.wal.bytes")
    walflow_slot_max_lag_bytes: int | None = Field(None, gt=0, alias="walflow.slot.max.lag.bytes")
    walflow_slot_max_seconds_since_confirmed: float | None = Field(
        None, gt=0, alias="walflow.slot.max.seconds.since.confirmed"
    )
    #: the stream batches walflow keeps a line of in its state, for walflow status and the UI page's plots (a ring:
    #: the oldest is overwritten, so the state never grows with the batches run)
    walflow_status_history_batches: int = Field(1000, ge=1, le=100_000, alias="walflow.status.history.batches")
    #: the monitor DAG (<name>__monitor): its schedule (None: no monitor DAG), and how long without a successful
    #: stream batch, and how many records the lake may be behind its topics, before it fails
    walflow_monitor_schedule: str | None = Field("*/5 * * * *", alias="walflow.monitor.schedule")
    walflow_monitor_max_seconds_since_batch: float | None = Field(
        3600.0, gt=0, alias="walflow.monitor.max.seconds.since.batch"
    )
    walflow_monitor_max_lake_records_behind: int | None = Field(
        None, ge=0, alias="walflow.monitor.max.lake.records.behind"
    )
    walflow_stream_trigger_wal_bytes: int | None = Field(None, gt=0, alias="walflow.stream.trigger.wal.bytes")
    walflow_stream_trigger_max_wait_seconds: float = Field(300.0, gt=0, alias="walflow.stream.trigger.max.wait.seconds")
    walflow_stream_trigger_poke_seconds: float = Field(5.0, gt=0, alias="walflow.stream.trigger.poke.seconds")
    #: Debezium's queue and batch between reading and Kafka: here librdkafka's (see :meth:`producer_overrides`)
    max_batch_size: int | None = Field(None, gt=0, alias="max.batch.size")
    max_queue_size: int | None = Field(None, gt=0, alias="max.queue.size")
    max_queue_size_in_bytes: int | None = Field(None, ge=0, alias="max.queue.size.in.bytes")
    #: Debezium's wait between two polls of the slot: the stream DAG's WAL sensor's poke interval, unless
    #: walflow.stream.trigger.poke.seconds is set
    poll_interval_ms: int | None = Field(None, gt=0, alias="poll.interval.ms")
    #: ``k=v,k2=v2``: tags of every metric the connector sends (Airflow's Stats: StatsD with tags, OpenTelemetry)
    custom_metric_tags: dict[str, str] = Field(default_factory=dict, alias="custom.metric.tags")
    #: ``<table regex>:<DEFAULT|FULL|NOTHING|INDEX name>`` items: the replica identity setup gives those tables
    replica_identity_autoset_values: list[tuple[str, str]] = Field(
        default_factory=list, alias="replica.identity.autoset.values"
    )
    #: Debezium drops the slot when a connector stops; a walflow connector stops after every batch, and its slot
    #: must outlive the batch: only false, the default, is accepted
    slot_drop_on_stop: bool = Field(False, alias="slot.drop.on.stop")
    walflow_state_table: str = Field("public.walflow_state", alias="walflow.state.table")
    #: the Connection of the database that holds the state table (none: the source database, the simple start); a
    #: connector that may not write to its source (read.only, a standby) keeps its state there
    walflow_state_conn_id: str | None = Field(None, alias="walflow.state.conn.id")
    #: Debezium's read.only: no write to the source by walflow (watermarks from snapshots' xids and WAL positions,
    #: no publication or table created, state in walflow.state.conn.id); a hot standby can be the source
    read_only: bool = Field(False, alias="read.only")
    #: PostgreSQL 17's failover slots: the slot walflow creates is synchronized to standbys (sync_replication_slots)
    slot_failover: bool = Field(False, alias="slot.failover")
    # a logical decoding message too large for a Kafka record: stop the batch before it (fail), or leave it out with
    # a warning (skip); messages are never table data
    walflow_message_oversized_handling_mode: Literal["fail", "skip"] = Field(
        "fail", alias="walflow.message.oversized.handling.mode"
    )
    # execute-snapshot signals queued behind the running one; later ones wait (state table) until there is room
    walflow_signal_queue_max: int = Field(16, ge=1, alias="walflow.signal.queue.max")
    # the record format: Debezium 3.6.3's, or the pre-2.6 envelope for consumers pinned to it (walflow.records.envelope)
    walflow_event_format: Literal["3.6", "pre-2.6"] = Field("3.6", alias="walflow.event.format")
    #: the lake (Spark and Iceberg) after the stream; on by default, off by default for a connector with 'transforms'
    #: (which rewrite the events the lake applies); on together with transforms is refused
    walflow_lake_enabled: bool = Field(True, alias="walflow.lake.enabled")
    # walflow's own topic of schema facts (walflow.capture.schema_facts), read by the lake job; written only with the
    # lake on
    walflow_schema_topic: str | None = Field(None, alias="walflow.schema.topic")
    walflow_lake_catalog: str = Field("lake", alias="walflow.lake.catalog")
    walflow_lake_namespace: str | None = Field(None, alias="walflow.lake.namespace")
    walflow_lake_warehouse: str | None = Field(None, alias="walflow.lake.warehouse")
    walflow_lake_max_records: int = Field(5_000_000, gt=0, alias="walflow.lake.max.records")
    walflow_lake_delete_mode: Literal["hard", "soft"] = Field("hard", alias="walflow.lake.delete.mode")
    walflow_lake_changelog: bool = Field(False, alias="walflow.lake.changelog")
    walflow_lake_spark_conf: dict[str, str] = Field(default_factory=dict, alias="walflow.lake.spark.conf")
    # "<topic>:<partition>:<offset>" of records the lake job could not apply, accepted as docs/lake.md says
    walflow_lake_accept_records: list[str] = Field(default_factory=list, alias="walflow.lake.accept.records")
    # the lake's Iceberg catalog as a JDBC catalog on a PostgreSQL Connection (None: the Hadoop folder catalog)
    walflow_lake_catalog_conn_id: str | None = Field(None, alias="walflow.lake.catalog.conn.id")
    walflow_lake_maintain_schedule: str | None = Field("@daily", alias="walflow.lake.maintain.schedule")
    walflow_lake_maintain_snapshot_retention_hours: float = Field(
        120.0, ge=0, alias="walflow.lake.maintain.snapshot.retention.hours"
    )
    walflow_lake_maintain_orphan_retention_hours: float = Field(
        72.0, ge=0, alias="walflow.lake.maintain.orphan.retention.hours"
    )
    walflow_lake_maintain_lock_wait_seconds: float = Field(
        3600.0, ge=0, alias="walflow.lake.maintain.lock.wait.seconds"
    )
    walflow_spark_conn_id: str = Field("spark_default", alias="walflow.spark.conn.id")
    walflow_snapshot_schedule: str | None = Field("@daily", alias="walflow.snapshot.schedule")
    walflow_owner: str = Field("airflow", min_length=1, alias="walflow.owner")
    walflow_on_failure_callback: str | None = Field(None, alias="walflow.on.failure.callback")
    walflow_snapshot_poke_seconds: float = Field(10.0, gt=0, alias="walflow.snapshot.poke.seconds")
    # with snapshot.max.threads above 1, a table is cut into key ranges of about this many rows (estimated)
    walflow_snapshot_range_rows: int = Field(50_000, ge=1, alias="walflow.snapshot.range.rows")
    #: with snapshot.max.threads above 1, Debezium's legacy parallel snapshot: each reader takes whole tables, and no
    #: row is marked ``first`` (Debezium marks ``last`` the row its threads happen to send last; walflow the last
    #: table's last row, as ever)
    legacy_snapshot_max_threads: bool = Field(False, alias="legacy.snapshot.max.threads")

    # -- patterned keys, collected by :func:`parse_config` ------------------------------------
    column_truncate: dict[int, list[str]] = Field(default_factory=dict, alias="__column_truncate")
    column_mask: dict[int, list[str]] = Field(default_factory=dict, alias="__column_mask")
    column_mask_hash: dict[tuple[str, str], list[str]] = Field(default_factory=dict, alias="__column_mask_hash")
    snapshot_select_overrides: dict[str, str] = Field(default_factory=dict, alias="__snapshot_select_overrides")
    #: Kafka Connect's topic creation groups and topic settings (``topic.creation.groups``,
    #: ``topic.creation.<group>.*``, ``topic.creation.default.<topic setting>``), as
    #: :func:`walflow.config.topics.parse_topic_creation` reads them
    topic_creation: dict[str, Any] = Field(default_factory=dict, alias="__topic_creation")
    #: ``signal.consumer.<setting>``: librdkafka settings of the Kafka signal channel's consumer
    signal_consumer: dict[str, str] = Field(default_factory=dict, alias="__signal_consumer")
    #: the single message transforms (``transforms``, ``transforms.<alias>.*``, ``predicates``...), in chain order
    transforms: tuple[TransformSpec, ...] = Field(default=(), alias="__transforms")
    #: the post processors (``post.processors`` and each alias's ``<alias>.*`` keys), in order
    post_processors: tuple[PostProcessorSpec, ...] = Field(default=(), alias="__post_processors")

    @field_validator(
        *_PATTERN_LISTS,
        "snapshot_select_statement_overrides",
        "walflow_lake_accept_records",
        "signal_enabled_channels",
        "notification_enabled_channels",
        mode="before",
    )
    @classmethod
    def _lists(cls, value: Any) -> list[str]:
        return _split_list(value)

    @field_validator("notification_enabled_channels", "signal_enabled_channels")
    @classmethod
    def _channels(cls, value: list[str], info: ValidationInfo) -> list[str]:
        allowed, message = _CHANNELS[cast(str, info.field_name)]  # a field validator's info names its field
        other = [channel for channel in value if channel not in allowed]
        if other:
            raise ValueError(message.format(other=other))
        return value

    @field_validator("tasks_max", mode="before")
    @classmethod
    def _tasks_max(cls, value: Any) -> Any:
        # Kafka Connect's REST API and most published configurations write every value as a string ("1")
        number = int(value) if isinstance(value, str) and value.strip().isdigit() else value
        if number != 1 or isinstance(number, bool):
            raise ValueError(
                "walflow runs one task per connector (one stream task reads the slot, as Debezium's PostgreSQL "
                "connector does); set 1 or leave the key out"
            )
        return number

    @field_validator("custom_metric_tags", mode="before")
    @classmethod
    def _metric_tags(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        tags: dict[str, str] = {}
        for item in _split_list(value):
            key, sep, tag = item.partition("=")
            if not sep or not key.strip() or not tag.strip():
                raise ValueError(f"{item!r} is not '<key>=<value>' (write the tags as k1=v1,k2=v2)")
            tags[key.strip()] = tag.strip()
        return tags

    @field_validator("replica_identity_autoset_values", mode="before")
    @classmethod
    def _replica_identities(cls, value: Any) -> Any:
        if isinstance(value, list) and all(isinstance(v, tuple) for v in value):
            return value
        pairs: list[tuple[str, str]] = []
        for item in _split_list(value):
            table, sep, identity = item.rpartition(":")
            kind = identity.strip().upper()
            if not sep or not table.strip():
                raise ValueError(f"{item!r} is not '<table regex>:<replica identity>'")
            if kind not in ("DEFAULT", "FULL", "NOTHING") and not (kind.startswith("INDEX ") and kind[6:].strip()):
                raise ValueError(
                    f"{item!r}: the replica identity is DEFAULT, FULL, NOTHING or INDEX <index name>, not "
                    f"{identity.strip()!r}"
                )
            pairs.append((table.strip(), identity.strip()))
        return pairs

    @field_validator("slot_drop_on_stop", mode="after")
    @classmethod
    def _slot_drop(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "true is not supported: a walflow connector stops after every stream batch, and its slot must outlive "
                "the batch; retire a connector with `walflow reset <connector>`, which drops its slot and state"
            )
        return value

    @field_validator("walflow_event_format", mode="before")
    @classmethod
    def _event_format(cls, value: Any) -> Any:
        # YAML reads an unquoted 3.6 as a number
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @field_validator("walflow_lake_spark_conf", mode="before")
    @classmethod
    def _spark_conf(cls, value: Any) -> Any:
        # Spark's settings are strings; YAML reads `spark.executor.instances: 2` or `...enabled: true` as a number
        # or a boolean, which Spark expects as "2" and "true"
        if not isinstance(value, dict):
            return value
        settings = {}
        for key, setting in value.items():
            if isinstance(setting, bool):
                setting = "true" if setting else "false"
            elif isinstance(setting, (int, float)):
                setting = str(setting)
            # a credentials *provider* (a class name, as fs.s3a.aws.credentials.provider) holds no secret
            if _SECRET_SETTING.search(str(key)) and not str(key).lower().endswith("provider"):
                raise ValueError(
                    f"{key!r} holds a credential: every walflow.lake.spark.conf setting reaches spark-submit's command "
                    "line, the task log and the serialized DAG. Give catalog credentials in the Airflow Connection "
                    "named by walflow.lake.catalog.conn.id (its password, or its extras), which reach the job through "
                    "its environment only"
                )
            settings[key] = setting
        return settings

    @field_validator("skipped_operations", mode="before")
    @classmethod
    def _ops(cls, value: Any) -> list[str]:
        ops = _split_list(value)
        if ops == ["none"]:
            return []
        bad = [op for op in ops if op not in ("c", "u", "d", "t")]
        if bad:
            raise ValueError(f"unknown operation(s) {bad}; allowed: c, u, d, t or none")
        return ops

    @field_validator(*_PATTERN_LISTS)
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        _check_patterns(value)
        return value

    @field_validator("walflow_state_table", "signal_data_collection")
    @classmethod
    def _table_name(cls, value: str | None) -> str | None:
        if value is not None:
            from walflow.names import split_table_name

            parts = value.split(".")
            # Debezium 2.x also accepts <database>.<schema>.<table> for PostgreSQL; the database is implicit
            split_table_name(".".join(parts[-2:]) if len(parts) == 3 and '"' not in value else value)
        return value

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not _TOPIC_PREFIX_RE.match(value):
            raise ValueError("only letters, digits, '.', '_' and '-' are allowed")
        if value in (".", ".."):
            raise ValueError(
                "'.' and '..' name no topic (and, as the default lake namespace, a folder outside the warehouse)"
            )
        return value

    @field_validator("walflow_lake_namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        # one folder of a Hadoop catalog's warehouse: no separator, no '.' or '..'
        if value and (value in (".", "..") or any(c in value for c in "/\\\0")):
            raise ValueError("a lake namespace is one name: no '/', '\\' or NUL, and not '.' or '..'")
        return value

    @field_validator("slot_name")
    @classmethod
    def _slot(cls, value: str) -> str:
        if not _SLOT_NAME_RE.match(value):
            raise ValueError("PostgreSQL slot names may hold only lower-case letters, digits and '_' (max 63)")
        return value

    @field_validator("walflow_on_failure_callback")
    @classmethod
    def _callback(cls, value: str | None) -> str | None:
        if value is not None and not _IMPORT_PATH_RE.match(value):
            raise ValueError("expected the import path of a function, such as my_package.alerts.notify")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _CONNECTOR_NAME_RE.match(value):
            raise ValueError("a connector name becomes part of DAG ids: use letters, digits, '_' and '-'")
        return value

    @model_validator(mode="before")
    @classmethod
    def _configuration_based(cls, data: Any) -> Any:
        """Debezium's ``configuration_based`` snapshot mode, read as the mode that does the same: a data snapshot at
        every start and then streaming is ``always``; streaming alone is ``no_data``. Its schema flags have nothing
        to act on (PostgreSQL keeps no schema history), and neither has ``snapshot.on.data.error`` with a snapshot at
        every start. The other combinations are refused with the mode to use."""
        if not isinstance(data, dict) or data.get("snapshot.mode") != "configuration_based":
            return data

        def flag(name: str) -> bool:
            value = data.get(f"snapshot.mode.configuration.based.{name}", False)
            return value if isinstance(value, bool) else str(value).strip().lower() == "true"

        if flag("snapshot.data") and flag("start.stream"):
            mode = "always"
        elif flag("start.stream") and not flag("snapshot.on.data.error"):
            mode = "no_data"
        else:
            raise ValueError(
                "'snapshot.mode: configuration_based' is supported where it does what another mode does: snapshot.data "
                "and start.stream (as 'always'), or start.stream alone (as 'no_data'); for a snapshot without "
                "streaming use 'initial_only', for a snapshot only when the slot's position is lost use 'when_needed'"
            )
        return {**data, "snapshot.mode": mode}

    @model_validator(mode="after")
    def _pairs(self) -> ConnectorConfig:
        for include, exclude in (
            ("schema.include.list", "schema.exclude.list"),
            ("table.include.list", "table.exclude.list"),
            ("column.include.list", "column.exclude.list"),
            ("message.prefix.include.list", "message.prefix.exclude.list"),
        ):
            if self.get(include) and self.get(exclude):
                raise ValueError(f"'{include}' and '{exclude}' cannot both be set; Debezium allows only one of them")
        if self.heartbeat_action_query and not self.heartbeat_interval_ms:
            raise ValueError("'heartbeat.action.query' needs 'heartbeat.interval.ms' > 0 to ever run")
        if "sink" in self.notification_enabled_channels and not self.notification_sink_topic_name:
            raise ValueError(
                "'notification.enabled.channels' has 'sink': set 'notification.sink.topic.name', the notifications' "
                "topic"
            )
        if self.value_converter_replace_null_with_default and self.walflow_lake_enabled:
            raise ValueError(
                "'value.converter.replace.null.with.default: true' writes a column's default where the row holds NULL, "
                "and the lake must hold what the source holds: leave the key out (walflow writes NULL while the lake "
                "is on), or set 'walflow.lake.enabled: false'"
            )
        if self.read_only:
            if not self.walflow_state_conn_id:
                raise ValueError(
                    "'read.only: true' means walflow writes nothing to the source, and its progress (snapshot state, "
                    "signals, the slot's last position) has to live somewhere: set 'walflow.state.conn.id' to the "
                    "Airflow Connection of a database walflow may write to"
                )
            if self.heartbeat_action_query:
                raise ValueError(
                    "'heartbeat.action.query' writes to the source, which 'read.only: true' forbids: leave one of "
                    "them out"
                )
        if self.transforms and self.walflow_lake_enabled and "walflow_lake_enabled" not in self.model_fields_set:
            # a Debezium configuration with transforms, as it is: its records are Debezium's, transformed, and the
            # lake (which needs them untransformed) is off unless the configuration turns it on
            object.__setattr__(self, "walflow_lake_enabled", False)
        if self.transforms and self.walflow_lake_enabled:
            raise ValueError(
                f"'transforms' ({', '.join(t.alias for t in self.transforms)}) rewrite the records before Kafka, and "
                "the lake applies Debezium's change events as the connector writes them (envelope, topics, keys): set "
                "'walflow.lake.enabled: false' for this connector, and feed the lake from a second connector without "
                "transforms (docs/transforms.md)"
            )
        return self

    # -- access --------------------------------------------------------------------------------
    def get(self, key: str) -> Any:
        """Return a setting by its Debezium (dotted) key."""
        field = _FIELD_BY_ALIAS.get(ALIASES.get(key, key))
        if field is None:
            raise KeyError(key)
        return getattr(self, field)

    @property
    def state_table(self) -> tuple[str, str]:
        from walflow.names import split_table_name

        return split_table_name(self.walflow_state_table)

    @property
    def signal_table(self) -> tuple[str, str] | None:
        from walflow.names import split_table_name

        if not self.signal_data_collection:
            return None
        parts = self.signal_data_collection.split(".")
        return split_table_name(
            ".".join(parts[-2:])
            if len(parts) == 3 and '"' not in self.signal_data_collection
            else self.signal_data_collection
        )

    @property
    def replace_null_with_default(self) -> bool:
        """Whether a null field that has a default is written as the default, as Kafka's JsonConverter does by
        default: ``value.converter.replace.null.with.default``, by default on with the lake off and off with it on."""
        if self.value_converter_replace_null_with_default is not None:
            return self.value_converter_replace_null_with_default
        return not self.walflow_lake_enabled

    @property
    def record_key_schemas(self) -> bool:
        """Whether walflow builds keys with their schemas: as the key converter says, and always under a transform
        chain, which needs the schemas (they are left out after it when the converter says so)."""
        return self.key_converter_schemas_enable or bool(self.transforms)

    @property
    def record_value_schemas(self) -> bool:
        """As :attr:`record_key_schemas`, for values."""
        return self.value_converter_schemas_enable or bool(self.transforms)

    @property
    def signal_topic(self) -> str:
        """The Kafka signal channel's topic: ``signal.kafka.topic``, by default ``<topic.prefix>-signal``."""
        return self.signal_kafka_topic or f"{self.topic_prefix}-signal"

    @property
    def transaction_topic(self) -> str:
        return f"{self.topic_prefix}{self.topic_delimiter}{self.topic_transaction}"

    @property
    def schema_topic(self) -> str:
        """The topic of the connector's schema facts (:mod:`walflow.capture.schema_facts`): ``walflow.schema.topic``, by
        default ``__walflow-schema<delimiter><topic.prefix>`` (named like the heartbeat topic: outside the prefix's
        topics)."""
        return self.walflow_schema_topic or f"__walflow-schema{self.topic_delimiter}{self.topic_prefix}"

    @property
    def heartbeat_topic(self) -> str:
        return self.topic_heartbeat_name or f"{self.topic_heartbeat_prefix}{self.topic_delimiter}{self.topic_prefix}"

    def check_guardrail(self, tables: int) -> str | None:
        """Debezium's guardrail on the number of captured tables: a warning to log (``warn``), or ``None``.

        :raises ConfigError: with ``guardrail.collections.limit.action: fail``, when ``tables`` exceeds the maximum.
        """
        if not self.guardrail_collections_max or tables <= self.guardrail_collections_max:
            return None
        message = (
            f"connector {self.name!r} captures {tables} tables, more than guardrail.collections.max="
            f"{self.guardrail_collections_max}: narrow table.include.list or schema.include.list, or raise the maximum"
        )
        if self.guardrail_collections_limit_action == "fail":
            raise ConfigError(message)
        return message

    def producer_overrides(self) -> dict[str, Any]:
        """librdkafka settings from Debezium's queue and batch keys: ``max.batch.size`` is ``batch.num.messages``,
        ``max.queue.size`` ``queue.buffering.max.messages``, ``max.queue.size.in.bytes`` (0: no bound in bytes, as in
        Debezium) ``queue.buffering.max.kbytes``. They override the Kafka Connection's extras: the connector file is
        the more specific of the two."""
        out: dict[str, Any] = {}
        if self.max_batch_size is not None:
            out["batch.num.messages"] = self.max_batch_size
        if self.max_queue_size is not None:
            out["queue.buffering.max.messages"] = self.max_queue_size
        if self.max_queue_size_in_bytes:
            out["queue.buffering.max.kbytes"] = max(1, -(-self.max_queue_size_in_bytes // 1024))
        return out

    def trigger_poke_seconds(self) -> float:
        """How often the stream DAG's WAL sensor looks: ``walflow.stream.trigger.poke.seconds`` when set, else
        Debezium's ``poll.interval.ms``, else 5 s."""
        if "walflow_stream_trigger_poke_seconds" in self.model_fields_set or self.poll_interval_ms is None:
            return self.walflow_stream_trigger_poke_seconds
        return self.poll_interval_ms / 1000

    def conninfo_options(self) -> dict[str, str]:
        """libpq options this config adds to the source Connection (TLS, keepalives)."""
        options: dict[str, str] = {}
        for key, attr in (
            ("sslmode", "database_sslmode"),
            ("sslcert", "database_sslcert"),
            ("sslkey", "database_sslkey"),
            ("sslrootcert", "database_sslrootcert"),
        ):
            value = getattr(self, attr)
            if value:
                options[key] = str(value)
        options["keepalives"] = "1" if self.database_tcp_keepalive else "0"
        return options


_FIELD_BY_ALIAS = {info.alias: name for name, info in ConnectorConfig.model_fields.items() if info.alias}
KNOWN_KEYS = frozenset(alias for alias in _FIELD_BY_ALIAS if not alias.startswith("__"))


def _format_validation_error(exc: ValidationError, raw: dict[str, Any], source: str) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"]) if err["loc"] else ""
        key = loc
        if not loc:
            lines.append(f"  {err['msg'].removeprefix('Value error, ')}")
            continue
        value = raw.get(key, err.get("input"))
        if err["type"] == "missing":
            lines.append(f"  '{key}' is required but missing")
        elif err["type"] == "extra_forbidden":
            lines.append(f"  '{key}' is not a known key")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"  '{key}' = {value!r}: {msg}")
    return f"invalid connector configuration {source}:\n" + "\n".join(lines)


def parse_config(raw: dict[str, Any], source: str = "<dict>") -> ConnectorConfig:
    """Validate a mapping of Debezium keys into a :class:`ConnectorConfig`.

    :param raw: the flat mapping read from YAML (keys are dotted Debezium property names).
    :param source: where ``raw`` came from, quoted in error messages.
    :raises ConfigError: naming every offending key, its value and what is allowed.
    """
    if not isinstance(raw, dict):
        raise ConfigError(
            f"connector configuration {source} must be a mapping of keys to values, got {type(raw).__name__}"
        )
    problems: list[str] = []
    data: dict[str, Any] = {}
    truncate: dict[int, list[str]] = {}
    mask: dict[int, list[str]] = {}
    mask_hash: dict[tuple[str, str], list[str]] = {}
    overrides: dict[str, str] = {}
    consumer_settings: dict[str, str] = {}
    spelled: dict[str, str] = {}  # canonical key -> the spelling the file used
    truncate_mode: str | None = None
    chain: dict[str, Any] = {}
    topic_keys: dict[str, Any] = {}
    processors: dict[str, Any] = {}
    processor_aliases = (
        post_processor_aliases(raw) if isinstance(raw.get("post.processors"), (str, list, tuple)) else []
    )
    for key, value in raw.items():
        if not isinstance(key, str):
            problems.append(f"  key {key!r} is not a string")
            continue
        if is_chain_key(key):
            chain[key] = value
            continue
        if key.startswith("topic.creation.") and key not in KNOWN_KEYS:
            topic_keys[key] = value
            continue
        if key == "post.processors" or (
            isinstance(key, str) and key.split(".", 1)[0] in processor_aliases and "." in key
        ):
            processors[key] = value
            continue
        if key in CONNECTION_KEYS:
            problems.append(
                f"  '{key}' does not belong in the connector file: walflow takes {CONNECTION_KEYS[key]} from the "
                f"Airflow Connection named by 'walflow.postgres.conn.id' (secrets never live in YAML)"
            )
            continue
        if key in UNSUPPORTED_KEYS:
            problems.append(f"  '{key}' is not supported by walflow: {UNSUPPORTED_KEYS[key]}")
            continue
        if key in NO_EFFECT_KEYS:
            continue  # documented in the README's table of Debezium's properties
        match = next(((i, m) for i, p in enumerate(_DYNAMIC_KEY_PATTERNS) if (m := p.match(key))), None)
        if match is not None:
            index, m = match
            try:
                if index == 0:
                    truncate[int(m.group(1))] = _split_list(value)
                elif index == 1:
                    mask[int(m.group(1))] = _split_list(value)
                elif index == 2:
                    mask_hash[(m.group(1), m.group(2))] = _split_list(value)
                elif index == 4:
                    if _SECRET_SETTING.search(m.group(1)):
                        raise ValueError(
                            "a credential in the connector file; the signal channel's consumer takes the Kafka "
                            "Connection's security settings (sasl.*, ssl.*), so give them there"
                        )
                    consumer_settings[m.group(1)] = str(value).lower() if isinstance(value, bool) else str(value)
                else:
                    if not isinstance(value, str):
                        raise TypeError("expected a SELECT statement as a string")
                    overrides[m.group(1)] = value
            except (TypeError, ValueError) as exc:
                problems.append(f"  '{key}' = {value!r}: {exc}")
            continue
        if key == TRUNCATE_HANDLING_MODE:
            if value not in ("skip", "include"):
                problems.append(f"  '{key}' = {value!r}: allowed values are 'skip' and 'include'")
            else:
                truncate_mode = value
            continue
        canonical = ALIASES.get(key, key)
        if canonical in data:
            problems.append(
                f"  '{key}' and '{spelled[canonical]}' name the same setting ('{canonical}'); keep only one of them"
            )
            continue
        spelled[canonical] = key
        if canonical not in KNOWN_KEYS:
            close = [k for k in sorted(KNOWN_KEYS) if k.split(".")[-1] == key.split(".")[-1]][:3]
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            problems.append(f"  '{key}' is not a known key{hint}")
            continue
        data[canonical] = value
    if truncate_mode is not None:
        problem = _fold_truncate_mode(truncate_mode, data)
        if problem:
            problems.append(problem)
    transforms, chain_problems = parse_chain(chain)
    problems.extend(chain_problems)
    post_processors, processor_problems = parse_post_processors(processors)
    problems.extend(processor_problems)
    topic_creation = parse_topic_creation(topic_keys, problems)
    if problems:
        raise ConfigError(f"invalid connector configuration {source}:\n" + "\n".join(problems))
    data["__transforms"] = transforms
    data["__post_processors"] = post_processors
    data["__topic_creation"] = topic_creation
    data["__column_truncate"] = truncate
    data["__column_mask"] = mask
    data["__column_mask_hash"] = mask_hash
    data["__snapshot_select_overrides"] = overrides
    data["__signal_consumer"] = consumer_settings
    try:
        return ConnectorConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, data, source)) from None


def _fold_truncate_mode(mode: str, data: dict[str, Any]) -> str | None:
    """Apply Debezium 1.x's ``truncate.handling.mode`` to ``skipped.operations``; return a problem, if any.

    ``include`` means truncate events are emitted (``t`` not skipped), ``skip`` that they are not. With
    ``skipped.operations`` also set, the two must agree.
    """
    if "skipped.operations" not in data:
        data["skipped.operations"] = "t" if mode == "skip" else "none"
        return None
    try:
        ops = _split_list(data["skipped.operations"])
    except TypeError:
        return None  # the field validator reports the wrong type
    skips_truncate = "t" in ops
    if skips_truncate != (mode == "skip"):
        return (
            f"  '{TRUNCATE_HANDLING_MODE}' = {mode!r} contradicts 'skipped.operations' = "
            f"{data['skipped.operations']!r}; set only 'skipped.operations' (add or leave out 't')"
        )
    return None
