"""One bounded streaming batch: slot → pgoutput decoding → Debezium events → Kafka → slot advance.

A batch peeks the slot (``pg_logical_slot_peek_binary_changes``, which does not consume anything) through a
server-side cursor, so memory stays bounded whatever the size of a transaction. It stops at the WAL position
taken when it started, or after ``walflow.batch.max.events`` events / ``walflow.batch.max.seconds``, always
at a transaction boundary. Only when Kafka has acknowledged every record does it advance the slot, to the end
of the last transaction it fully produced. A crash anywhere before that repeats the batch: at-least-once
delivery, as with Debezium.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg

from walflow.capture.batches import BatchSummary, previous_batch_record, record_batch
from walflow.capture.changes import ChangeEvents, Transaction
from walflow.capture.drift import (
    KeyRegistry,
    check_claims,
    check_publication,
    check_topic_owner,
    check_topics,
    record_claim,
)
from walflow.capture.incremental import STATE_KEY as INCREMENTAL_KEY
from walflow.capture.incremental import WATERMARK_PREFIX, IncrementalSnapshots
from walflow.capture.kafka_signals import read_kafka_signals
from walflow.capture.prefetch import BlockPrefetch
from walflow.capture.rereads import Rereads
from walflow.capture.reselect import reselectors
from walflow.capture.schema_facts import SchemaFacts, build_fact
from walflow.capture.snapshot import InitialSnapshot
from walflow.capture.snapshot_tables import plan_tables
from walflow.config.connector import ConnectorConfig
from walflow.config.filters import Filters
from walflow.errors import (
    ConversionError,
    DriftError,
    RecordTooLargeError,
    SlotError,
    SourceUnavailableError,
)
from walflow.kafka import EventProducer, use_topic_creation
from walflow.records.events import Serializer, TableSchema, now_ms
from walflow.records.transforms import ColumnRules
from walflow.source.catalog import Catalog
from walflow.source.connection import MESSAGES_SERVER_VERSION, connect, server_info, server_timeline
from walflow.source.ddl_facts import PREFIX as DDL_PREFIX
from walflow.source.ddl_facts import TRIGGER as DDL_TRIGGER
from walflow.source.ddl_facts import DdlFacts, trigger_enabled
from walflow.source.health import assess_slot_health, health_limits, slot_health
from walflow.source.locks import release_slot_lock, try_lock_slot
from walflow.source.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputDecoder,
    Relation,
    Truncate,
    Update,
    lsn_to_str,
    str_to_lsn,
)
from walflow.source.publication import list_tables, publication_tables
from walflow.source.signals import first_line, signal_key
from walflow.source.slot import check_slot, check_synchronized_standbys
from walflow.source.state import StateStore
from walflow.transforms.producer import with_transforms

log = logging.getLogger(__name__)

#: How many rows the server-side cursor hands over per round trip.
FETCH_ROWS = 2000
#: Seconds between two progress lines in the task log.
PROGRESS_EVERY_S = 10.0
#: Seconds a round waits for the WAL to be flushed up to where its read-only windows' rows are due.
READ_ONLY_FLUSH_WAIT_S = 5.0


class StreamBatch:
    """Stream one bounded batch of a connector's slot to Kafka.

    :param config: the validated connector configuration.
    :param conninfo: libpq connection string of the source database (from the Airflow Connection).
    :param producer: the Kafka producer to write to.
    :param fault_hook: test seam called with a stage name ("before_produce", "produced", "flushed"); the
        fault-injection tests kill the process there. It does nothing in production.
    :param chunk_hook: test seam called with the table name and the rows of each incremental-snapshot chunk
        between its SELECT and its high watermark, so a test can commit a change inside the window on purpose.
    :param reader_conninfo: libpq connection string of the role that evaluates the conditions of signals
        (``walflow.postgres.reader.conn.id``); without it, signals with a condition fail.
    :param state_conninfo: libpq connection string of the database that holds the state table
        (``walflow.state.conn.id``); without it, the state table is in the source database.
    """

    def __init__(
        self,
        config: ConnectorConfig,
        conninfo: str,
        producer: EventProducer,
        *,
        fault_hook: Callable[[str], None] | None = None,
        chunk_hook: Callable[[str, list[list[Any]]], None] | None = None,
        reader_conninfo: str | None = None,
        state_conninfo: str | None = None,
    ) -> None:
        self.config = config
        self.conninfo = conninfo
        self.reader_conninfo = reader_conninfo
        self.state_conninfo = state_conninfo
        #: the connection to the state database (walflow.state.conn.id), when the state is not in the source
        self._state_conn: psycopg.Connection | None = None
        use_topic_creation(producer, config)
        self.producer = with_transforms(producer, config)
        self.filters = Filters(config)
        self.rules = ColumnRules(config)
        self.serializer = Serializer(config.record_key_schemas, config.record_value_schemas)
        #: turns the decoded changes into Debezium's records; it asks this batch for each relation's schema
        self.events = ChangeEvents(config, self.producer, self.serializer, self._schema)
        self._fault = fault_hook or (lambda stage: None)
        self._chunk_hook = chunk_hook
        self._schemas: dict[int, TableSchema | None] = {}
        self._inc: IncrementalSnapshots | None = None
        self._per_topic: Counter[str] = Counter()
        #: relation OID -> whether this batch captured it before its latest Relation message (renames)
        self._captured_before: dict[int, bool] = {}
        self._uncaptured_warned: set[int] = set()
        #: an error at one change (a record Kafka cannot take, a table's key or topic drifting): the batch stops
        #: before that change's transaction, confirms what came before, then raises it
        self._stop_error: RecordTooLargeError | DriftError | None = None
        self._topic_owners: dict[str, str] = {}
        self._keys: KeyRegistry | None = None
        #: the re-reads walflow starts itself for the lake (walflow.capture.rereads), when the connector has a lake
        self._rereads: Rereads | None = None
        #: the captured tables by (schema, table), with their relation OIDs (read before the batch streams)
        self._captured: dict[tuple[str, str], int] = {}
        #: tables the publication lacked and this batch put back (their changes before were never decoded)
        self._added: set[tuple[str, str]] = set()
        #: schema facts for the lake (walflow.capture.schema_facts), when the connector has a lake
        self._facts: SchemaFacts | None = None
        #: relation OID -> LSN of its latest Relation message (where a new definition starts)
        self._relation_lsn: dict[int, int] = {}
        self._catalog_conn: Any = None
        #: the tables' keys as DDL left them, from the WAL (walflow.source.ddl_facts; the event trigger, where installed)
        self._ddl = DdlFacts(None, 0)

    # -- public -----------------------------------------------------------------------------------
    def run(self) -> BatchSummary:
        config = self.config
        events = self.events
        summary = BatchSummary(connector=config.name, slot=config.slot_name)
        started = time.monotonic()
        statements = config.database_initial_statements
        conn = connect(self.conninfo, application_name=f"walflow:{config.name}:stream", initial_statements=statements)
        try:
            catalog_conn = connect(self.conninfo, application_name=f"walflow:{config.name}:catalog", initial_statements=statements)
        except BaseException:
            conn.close()
            raise
        try:
            if self.state_conninfo is not None:
                self._state_conn = connect(self.state_conninfo, application_name=f"walflow:{config.name}:state")
            try_lock_slot(conn, config)
            store = self._store(conn)
            snapshot_state = store.get("snapshot")
            if config.snapshot_mode == "initial_only":
                log.info("connector %s: snapshot.mode=initial_only, so it does not stream", config.name)
                summary.stopped_by = "snapshot.mode=initial_only"
                return summary
            if snapshot_state and snapshot_state.get("status") == "running":
                raise SlotError(
                    f"the initial snapshot of connector {config.name!r} has not completed (a setup run is taking it, "
                    f"or died while taking it). Streaming now could put changes ahead of snapshot rows; run "
                    f"{config.name}__setup until it succeeds, then stream."
                )
            info = server_info(conn)
            slot = self._slot(conn, info.database)
            assert slot is not None
            check_synchronized_standbys(conn, slot)
            self._check_drift(conn, catalog_conn, store, summary)
            self.producer.check_reachable()
            self.events.database = info.database
            self._catalog = Catalog(catalog_conn)
            self._catalog_conn = catalog_conn
            if trigger_enabled(catalog_conn):
                log.info("connector %s: keys as each DDL left them, from the event trigger %s (messages %r in the WAL)", config.name, DDL_TRIGGER, DDL_PREFIX)
            else:
                log.info(
                    "connector %s: keys from the catalog when the batch reaches a change of a redefined table (no DDL event "
                    "trigger: install include/sql/ddl_facts.sql as a superuser for keys as they were at each change)",
                    config.name,
                )
            if config.walflow_lake_enabled:
                # the catalog's autocommit connection: the stream connection holds the peek's transaction open
                self._facts = SchemaFacts(self._store(catalog_conn), self.producer, config.schema_topic)
                log.info(
                    "connector %s: schema facts for the lake from the catalog, read when a table's definition changes (topic %s)",
                    config.name, config.schema_topic,
                )
            if self._facts is not None and store.exists():
                self._rereads = Rereads(self._store(catalog_conn), catalog_conn, self.producer, config.schema_topic, config.name, self._incremental)
                self._rereads.check(self._captured)
                for schema, table in sorted(self._added):
                    self._rereads.start(schema, table, "it was not in the publication, so its changes were never decoded", since=self._rereads.checked_at)
            events.reselect = reselectors(config, lambda: catalog_conn)
            if config.signal_table or store.get(INCREMENTAL_KEY):
                self._incremental()
            if "kafka" in config.signal_enabled_channels:
                inc_signals = self._incremental()
                kafka_signals, read = read_kafka_signals(config, self.producer.settings, inc_signals.kafka_offsets)
                for signal in kafka_signals:
                    inc_signals.on_kafka_signal(signal.partition, signal.offset, signal.values)
                inc_signals.kafka_read_up_to(read)
                if inc_signals.blocking:
                    # a Kafka signal has no place in the WAL: its blocking snapshot runs before the batch streams
                    self._blocking_snapshots(inc_signals, summary)
            if config.heartbeat_action_query:
                self._run_heartbeat_query(conn)
            summary.start_lsn = slot.confirmed_flush_lsn
            # Debezium's source.sequence starts with the end of the last commit it processed: none in a connector's
            # first run (its offsets hold none yet), otherwise what the previous batch read last
            previous_batch = previous_batch_record(store)
            events.previous_commit_lsn = previous_batch.get("last_commit_lsn")
            events.last_commit_us = previous_batch.get("last_commit_us")
            # A server crash can roll a logical slot back to its last checkpointed position, behind the position
            # the previous batch advanced it to (its state row is WAL-logged, the slot's advance is not). What lies
            # in between is in Kafka already (the slot only moves after the flush): skip it, as Debezium skips
            # what its offsets say it processed, rather than produce it again with a newer source.sequence.
            confirmed_to = previous_batch.get("confirmed_to")
            skip_before = str_to_lsn(confirmed_to) if confirmed_to else None
            summary.timeline = server_timeline(conn)
            failed_over = previous_batch.get("timeline") not in (None, summary.timeline)
            if failed_over and skip_before is not None and skip_before > str_to_lsn(slot.confirmed_flush_lsn):
                # A promoted standby's slot (slot.failover: synchronized from the old primary) lags what the previous
                # batch confirmed there, and past the promotion the same positions hold other transactions: nothing
                # is skipped, so what lies in between is produced again (duplicates, never a gap).
                log.warning(
                    "connector %s: the server is on timeline %s and the previous batch ran on timeline %s (a failover); "
                    "slot %s is at %s, behind %s where the previous batch left it on the old primary: the transactions "
                    "in between are streamed again (at-least-once duplicates, docs/operations.md)",
                    config.name, summary.timeline, previous_batch.get("timeline"), config.slot_name, slot.confirmed_flush_lsn, confirmed_to,
                )  # fmt: skip
                skip_before = None
            elif skip_before is not None and skip_before > str_to_lsn(slot.confirmed_flush_lsn):
                log.warning(
                    "connector %s: slot %s is at %s, behind %s where the previous batch left it (the server "
                    "restarted without a checkpoint); the transactions in between are in Kafka already and are skipped",
                    config.name, config.slot_name, slot.confirmed_flush_lsn, confirmed_to,
                )  # fmt: skip
            else:
                skip_before = None
            # the DDL facts recorded up to where this batch starts reading (or skipping: those transactions' facts
            # are not read again)
            read_from = max(str_to_lsn(slot.confirmed_flush_lsn), skip_before or 0)
            self._ddl = DdlFacts(self._store(catalog_conn) if store.exists() else None, read_from)
            inc = self._inc
            # One round = select incremental-snapshot chunks (if any), stream up to the current WAL position,
            # flush, advance the slot, save progress. Without a running incremental snapshot there is one round.
            while True:
                if inc is not None and inc.active:
                    if info.version_num < MESSAGES_SERVER_VERSION:
                        raise SlotError(
                            f"incremental snapshots need PostgreSQL 14 or newer (watermarks are logical decoding "
                            f"messages); this server is {info.version}"
                        )
                    self._fault("incremental_chunk")
                    inc.prepare(max(config.incremental_snapshot_chunk_size, ROUND_ROWS), ROUND_BYTES)
                upto_text = self._wal_end(conn, inc.wal_needed if inc is not None else None)
                summary.upto_lsn = upto_text
                log.info(
                    "connector %s: streaming slot %s from %s up to %s (at most %d events, %.0f s)",
                    config.name,
                    config.slot_name,
                    summary.advanced_to or slot.confirmed_flush_lsn,
                    upto_text,
                    config.walflow_batch_max_events,
                    config.walflow_batch_max_seconds,
                )
                summary.stopped_by = "end"
                advance_to = self._stream(conn, upto_text, info.version_num, summary, started, skip_before)
                if config.heartbeat_interval_ms > 0 and not summary.heartbeat_sent:
                    # A batch runs far less often than a Debezium heartbeat interval, so each batch sends one.
                    events.send_heartbeat()
                    summary.heartbeat_sent = True
                self._fault("before_flush")
                self.producer.flush(config.walflow_kafka_flush_timeout_s)
                self._fault("flushed")
                summary.records = self.producer.sent
                summary.bytes = self.producer.bytes
                if self._facts is not None:
                    self._facts.save()  # acknowledged: the definitions they describe are now the ones to compare with
                    summary.schema_facts = [f"{f.schema}.{f.table}@{lsn_to_str(f.lsn)}" for f in self._facts.produced]
                inc = self._inc  # a re-read this round may have started the incremental snapshots
                if inc is not None:
                    # Saved before the slot moves past the signals and watermarks this round read: a crash
                    # after the advance would otherwise lose a signal read this round.
                    inc.abandon()
                    inc.save()
                    summary.snapshot_rows = inc.rows_emitted
                    summary.snapshot_rows_dropped = inc.rows_dropped
                    summary.signals = inc.signals_seen
                    self._fault("incremental_saved")
                if self._rereads is not None:
                    summary.rereads = list(self._rereads.started)
                    # after the incremental snapshots' save: a sweep is written once its re-read is recorded complete
                    if self._rereads.finish():
                        self.producer.flush(config.walflow_kafka_flush_timeout_s)
                    self._rereads.save()
                if advance_to is not None:
                    summary.advanced_to = lsn_to_str(self._advance(conn, advance_to))
                if self._stop_error is not None:
                    log.error(
                        "connector %s: stopped at a change it cannot stream; the slot is at %s, the end of the last "
                        "transaction before it",
                        config.name,
                        summary.advanced_to or slot.confirmed_flush_lsn,
                    )
                    break  # raised once the batch's state is saved (below): the next batch starts where this one ended
                if not (inc is not None and inc.active and summary.stopped_by == "end"):
                    break
                if summary.events >= config.walflow_batch_max_events:
                    summary.stopped_by = "walflow.batch.max.events"
                    break
                if time.monotonic() - started >= config.walflow_batch_max_seconds:
                    summary.stopped_by = "walflow.batch.max.seconds"
                    break
            if events.last_emit is not None:
                op, table, lsn, ts_ms = events.last_emit
                summary.last_event = {"op": op, "table": table.data_collection, "lsn": lsn_to_str(lsn), "ts_ms": ts_ms}
            record_batch(store, summary, previous_batch, round(time.monotonic() - started, 3), events.previous_commit_lsn, events.last_commit_us)
            if self._stop_error is not None:
                raise self._stop_error
            self._check_retained_wal(conn, summary, store)
        except psycopg.OperationalError as exc:
            # the server restarting or the network, mid-batch: worth a retry, and said so with the connector's name
            self.producer.close()
            raise SourceUnavailableError(
                f"connector {config.name}: the connection to the source database was lost during the batch "
                f"({first_line(exc)}); the slot never moves past what Kafka acknowledged, so the next run (the "
                "task's retry) streams the rest"
            ) from exc
        except BaseException:
            self.producer.close()
            raise
        finally:
            if self._inc is not None:
                self._inc.close()
            catalog_conn.close()
            if self._state_conn is not None:
                self._state_conn.close()
            release_slot_lock(conn)
            conn.close()
        summary.seconds = round(time.monotonic() - started, 3)
        rate = summary.events / summary.seconds if summary.seconds else 0.0
        log.info(
            "connector %s: batch done: %d event(s) in %d transaction(s), %d record(s), %.1f MB, %.0f events/s, "
            "slot advanced to %s (stopped by %s)",
            config.name,
            summary.events,
            summary.transactions,
            summary.records,
            summary.bytes / 1e6,
            rate,
            summary.advanced_to,
            summary.stopped_by,
        )
        return summary

    # -- internals --------------------------------------------------------------------------------
    def _store(self, source_conn: psycopg.Connection) -> StateStore:
        """The connector's state: in the state database when ``walflow.state.conn.id`` names one, otherwise in the
        source, on ``source_conn`` (the stream's connection before and after the peek, the catalog's during it)."""
        return StateStore(self._state_conn or source_conn, self.config.name, self.config.state_table)

    def _wal_end(self, conn: psycopg.Connection, needed: int | None) -> str:
        """Where this round reads the slot up to: the flushed end of WAL on a primary, the replayed end on a hot
        standby (what logical decoding can read there).

        The flushed end, not pg_current_wal_lsn() (written, maybe not yet flushed): logical decoding reads only
        flushed WAL, so a transaction committed asynchronously (synchronous_commit=off) and written but not flushed
        when the peek starts would not be read, and the slot, moved to the end point afterwards, would skip it.
        ``needed``: read-only windows whose rows are due at that position, which walflow may not flush by writing
        a watermark; the server's WAL writer flushes it within moments, so the round waits for it (a few seconds
        at most, after which the chunks wait for the next round).
        """
        deadline = time.monotonic() + READ_ONLY_FLUSH_WAIT_S
        while True:
            row = conn.execute(
                "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_flush_lsn() END)::text"
            ).fetchone()
            upto_text = str(row[0]) if row and row[0] else "0/0"
            if needed is None or str_to_lsn(upto_text) >= needed or time.monotonic() >= deadline:
                return upto_text
            time.sleep(0.02)

    def _check_retained_wal(self, conn: psycopg.Connection, summary: BatchSummary, store: StateStore) -> None:
        """Judge the slot's health after this batch advanced it: warn, or fail above the hard limit.

        Checked after the batch has streamed and advanced the slot, so the check never stops the one thing that
        lets the server recycle WAL: a slot still above the limit then is one that does not keep up. The same
        judgement as ``walflow status`` (:func:`walflow.source.health.assess_slot_health`).
        """
        config = self.config
        state = {"last_batch": store.get("last_batch")} if store.exists() else None
        health = slot_health(conn, config.slot_name, state)
        if not health.exists:
            return  # dropped while the batch ran; the next batch's slot check says so
        summary.retained_wal_bytes, summary.lag_bytes = health.retained_wal_bytes, health.confirmed_lag_bytes
        warnings, error = assess_slot_health(health, health_limits(config))
        if error:
            raise SlotError(f"{error} (this batch itself was delivered and the slot advanced)")
        for warning in warnings:
            log.warning("connector %s: %s", config.name, warning)

    def _reader_factory(self) -> Callable[[], psycopg.Connection] | None:
        """What opens the reader role's connection (signals' conditions are evaluated as that role), or ``None``."""
        if self.reader_conninfo is None:
            return None
        conninfo, config = self.reader_conninfo, self.config
        # database.initial.statements too: the chunks read the tables in the session a snapshot reads them in
        return lambda: connect(conninfo, application_name=f"walflow:{config.name}:reader", initial_statements=config.database_initial_statements)

    def _check_drift(self, conn: psycopg.Connection, catalog_conn: psycopg.Connection, store: StateStore, summary: BatchSummary) -> None:
        """Before reading the slot: the slot and prefix are this connector's, the publication still holds what it
        should (repaired when walflow manages it), and no two captured tables share a topic (see :mod:`walflow.capture.drift`)."""
        config = self.config
        if store.exists():
            check_claims(store, config)
            record_claim(store, config)  # connectors set up before claims were recorded claim on their next batch
        listed = {(s, t): oid for s, t, oid, *_ in list_tables(conn, self.filters)}
        captured = set(listed)
        guardrail = config.check_guardrail(len(captured))
        if guardrail:
            summary.warnings.append(guardrail)
        warnings, self._added = check_publication(conn, config, store if store.exists() else None, captured)
        summary.warnings.extend(warnings)
        published = publication_tables(conn, config.publication_name)
        if published is not None and not published[0]:
            captured &= published[2]
        self._captured = {name: listed[name] for name in captured}
        self._topic_owners = check_topics(config, sorted(captured))
        self._keys = KeyRegistry(self._store(catalog_conn)) if store.exists() else None

    def _run_heartbeat_query(self, conn: psycopg.Connection) -> None:
        try:
            with conn.cursor() as cur:
                cur.execute(self.config.heartbeat_action_query)  # type: ignore[arg-type]
        except psycopg.Error as exc:
            log.warning("heartbeat.action.query failed (%s); streaming continues", str(exc).strip())

    def _advance(self, conn: psycopg.Connection, lsn: int) -> int:
        """Move the slot's confirmed position to ``lsn``; return where the slot is now (the server never moves it
        past its flushed WAL, and a slot already further stays where it is), which is what the state records."""
        with conn.cursor() as cur:
            cur.execute(
                "SELECT end_lsn::text FROM pg_replication_slot_advance(%s, %s::pg_lsn)",
                (self.config.slot_name, lsn_to_str(lsn)),
            )
            row = cur.fetchone()
        return str_to_lsn(row[0]) if row and row[0] else lsn

    def _stream(
        self,
        conn: psycopg.Connection,
        upto_text: str,
        server_version: int,
        summary: BatchSummary,
        started: float,
        skip_before: int | None = None,
    ) -> int | None:
        """Stream the slot up to ``upto_text`` and return where the slot may advance to (None: nowhere yet).

        Transactions that commit before ``skip_before`` were produced by an earlier batch and are read past
        (their Relation messages still refresh the schema cache)."""
        config = self.config
        producer = self.producer
        decoder = PgOutputDecoder()
        max_events = config.walflow_batch_max_events
        deadline = started + config.walflow_batch_max_seconds
        options = ["proto_version", "1", "publication_names", _quote_publication(config.publication_name)]
        if server_version >= MESSAGES_SERVER_VERSION:
            options += ["messages", "true"]
        per_topic = self._per_topic
        inc = self._inc
        # read-only windows close at a WAL position (IncrementalSnapshots.on_position), checked at each BEGIN; the
        # other windows close at their high watermark, and their BEGINs need no check
        closes_at_positions = inc if config.read_only else None
        events = self.events
        rereads = self._rereads
        # where the slot was when the batch began: the end of the last commit read before it, in a connector's first
        # batch (whose events carry no previous commit)
        start_lsn = str_to_lsn(summary.start_lsn) if summary.start_lsn else 0
        tx: Transaction | None = None
        last_commit_end: int | None = None
        complete = True
        next_progress = time.monotonic() + PROGRESS_EVERY_S
        # upto_nchanges bounds the server-side work too (PostgreSQL stops only at a transaction boundary). It
        # counts protocol messages, Begin/Commit/Relation included, hence the headroom over max_events (and a
        # constant part for the few transactions of bookkeeping a batch writes, which the next one decodes too).
        upto_nchanges = max_events * 3 + 64 + (8 * len(inc.chunks) if inc is not None else 0)
        returned = 0
        skipping = False
        skipped = 0
        conn.autocommit = False
        try:
            with conn.cursor(name="walflow_peek", binary=True) as cur:
                cur.itersize = FETCH_ROWS
                cur.execute(
                    "SELECT (lsn - '0/0')::int8, data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, %s, "
                    + ", ".join(["%s"] * len(options))
                    + ")",
                    (config.slot_name, upto_text, upto_nchanges, *options),
                )
                blocks = BlockPrefetch(cur, FETCH_ROWS)
                try:
                    while True:
                        rows = blocks.next()
                        if not rows:
                            break
                        returned += len(rows)
                        for lsn_value, data in rows:
                            msg = decoder.decode(data)
                            cls = type(msg)
                            if skipping and cls is not Commit and cls is not Relation:
                                continue
                            if cls is Insert or cls is Update or cls is Delete:
                                assert tx is not None
                                try:
                                    events.change(msg, tx, lsn_value, summary, per_topic)
                                except ConversionError as exc:
                                    raise _stopped_at(exc, lsn_value, tx.xid) from None
                            elif cls is Begin:
                                if skip_before is not None and msg.final_lsn < skip_before:  # type: ignore[attr-defined]
                                    skipping = True
                                    continue
                                if rereads is not None and (due := rereads.next_due) is not None and msg.final_lsn >= due:  # type: ignore[attr-defined]
                                    rereads.reached(msg.final_lsn, events.previous_commit_lsn or start_lsn)  # type: ignore[attr-defined]
                                if closes_at_positions is not None and (due := closes_at_positions.next_close) is not None and msg.final_lsn >= due:  # type: ignore[attr-defined]
                                    # every transaction the chunks' snapshots saw is streamed
                                    closes_at_positions.on_position(msg.final_lsn, events.sequence(lsn_value), per_topic)  # type: ignore[attr-defined]
                                tx = Transaction(msg, lsn_value)  # type: ignore[arg-type]
                                self._fault("before_produce")
                            elif cls is Commit:
                                if skipping:
                                    skipping = False
                                    skipped += 1
                                    last_commit_end = msg.end_lsn  # type: ignore[attr-defined]
                                    continue
                                assert tx is not None
                                events.tx_end(tx, msg.end_lsn, summary)  # type: ignore[attr-defined]
                                if events.inc is not None and events.inc.blocking:
                                    self._blocking_snapshots(events.inc, summary)
                                summary.transactions += 1
                                last_commit_end = msg.end_lsn  # type: ignore[attr-defined]
                                # Debezium's "last commit LSN": the position it reports for the commit, its end
                                events.previous_commit_lsn = last_commit_end
                                events.last_commit_us = tx.commit_us
                                if summary.first_lsn is None and tx.total:
                                    summary.first_lsn = lsn_to_str(tx.final_lsn)
                                if tx.total:
                                    summary.last_lsn = lsn_to_str(tx.final_lsn)
                                    summary.last_event_commit_ms = tx.commit_ms
                                tx = None
                                if summary.events >= max_events:
                                    summary.stopped_by = "walflow.batch.max.events"
                                    complete = False
                                    break
                                if time.monotonic() >= deadline:
                                    summary.stopped_by = "walflow.batch.max.seconds"
                                    complete = False
                                    break
                            elif cls is Relation:
                                self._relation_lsn[msg.relation_id] = lsn_value  # type: ignore[attr-defined]
                                previous = self._schemas.pop(msg.relation_id, None)  # type: ignore[attr-defined]
                                self._captured_before[msg.relation_id] = previous is not None  # type: ignore[attr-defined]
                                self._catalog.forget(msg.relation_id)  # type: ignore[attr-defined]
                            elif cls is Truncate:
                                assert tx is not None
                                events.truncate(msg, tx, lsn_value, summary, per_topic)
                            elif cls is Message:
                                if tx is None and skip_before is not None and lsn_value < skip_before:
                                    continue  # a non-transactional message an earlier batch read
                                if msg.prefix == WATERMARK_PREFIX:  # type: ignore[attr-defined]
                                    if inc is not None:
                                        inc.on_watermark(msg.content, events.sequence(lsn_value), per_topic)  # type: ignore[attr-defined]
                                else:
                                    if msg.prefix == DDL_PREFIX and msg.transactional:  # type: ignore[attr-defined]
                                        # emitted as well below, as Debezium emits every logical decoding message
                                        self._ddl.observe(msg.content, lsn_value)  # type: ignore[attr-defined]
                                    events.message(msg, tx, lsn_value, summary, per_topic)  # type: ignore[arg-type]
                                if tx is None:
                                    # outside a transaction a message is a commit of its own (Debezium's view too):
                                    # the slot may move to its LSN, which for a message is the end of its record
                                    # (decoding then skips it and reads the next), or a batch cut among such
                                    # messages by upto_nchanges would confirm nothing and read them again, forever
                                    last_commit_end = max(last_commit_end or 0, lsn_value)
                            elif cls is Origin and tx is not None:
                                tx.origin, tx.origin_lsn = msg.name, msg.lsn  # type: ignore[attr-defined]
                                # pgoutput sends the Begin of a replayed transaction together with its Origin, and the
                                # streaming protocol then reports no LSN for the Begin: Debezium's BEGIN id has LSN 0
                                tx.begin_lsn = 0
                        else:
                            now = time.monotonic()
                            if now >= next_progress:
                                next_progress = now + PROGRESS_EVERY_S
                                self._progress(summary, producer, lsn_value, started)
                            self._fault("produced")
                            continue
                        break
                finally:
                    blocks.close()
        except (RecordTooLargeError, DriftError, ConversionError) as exc:
            # Everything before this transaction is confirmed once acknowledged; the run then fails with the fix.
            self._stop_error = exc
            complete = False
            if isinstance(exc, RecordTooLargeError):
                summary.stopped_by = "record too large"
            else:
                summary.stopped_by = "value not convertible" if isinstance(exc, ConversionError) else "drift"
        finally:
            if not conn.closed:
                conn.rollback()
                conn.autocommit = True
        summary.events_per_topic = dict(per_topic)
        if skipped:
            log.warning("connector %s: skipped %d transaction(s) an earlier batch produced", config.name, skipped)
        if complete and returned >= upto_nchanges:
            # PostgreSQL stopped at upto_nchanges, before upto: only what was read may be confirmed.
            complete = False
            summary.stopped_by = "upto_nchanges"
        if complete:
            # Everything committed before upto was read: the slot may move there even if nothing was captured,
            # which keeps an idle or filtered-out database from retaining WAL.
            upto = str_to_lsn(upto_text)
            if closes_at_positions is not None and closes_at_positions.next_close is not None:
                closes_at_positions.on_position(upto, events.sequence(upto), per_topic)  # read-only windows due by the end
            if rereads is not None and (due := rereads.next_due) is not None and upto >= due:
                # every transaction that commits before upto was read: the next one commits after the decisions
                rereads.reached(upto, events.previous_commit_lsn or start_lsn)
            return max(upto, last_commit_end or 0)
        return last_commit_end

    def _progress(self, summary: BatchSummary, producer: EventProducer, lsn_value: Any, started: float) -> None:
        elapsed = time.monotonic() - started
        log.info(
            "connector %s: %d event(s), %.1f MB produced, %d acknowledged, LSN %s, %.0f events/s",
            self.config.name,
            summary.events,
            producer.bytes / 1e6,
            producer.acked,
            lsn_to_str(lsn_value),
            summary.events / elapsed if elapsed else 0.0,
        )

    def _schema(self, relation: Relation) -> TableSchema | None:
        rid = relation.relation_id
        try:
            return self._schemas[rid]
        except KeyError:
            pass
        schema: TableSchema | None
        if self._rereads is not None:
            self._rereads.other_name(relation, self._relation_lsn.get(rid, 0))
        if not self.filters.table_included(relation.namespace, relation.name):
            schema = None
            self._warn_uncaptured(relation)
        else:
            schema = TableSchema.from_relation(
                self.config, self.filters, self.serializer, relation, self._ddl.apply(self._catalog.table(rid)), self.rules,
                types=self._catalog.types,
            )
            check_topic_owner(self._topic_owners, schema)
            if self._keys is not None:
                self._keys.check(schema, self.config.name)
            self.producer.ensure_topic(schema.topic)
            if self._facts is not None:
                self._observe_definition(relation, schema)
        self._schemas[rid] = schema
        return schema

    def _observe_definition(self, relation: Relation, schema: TableSchema) -> None:
        """Write the table's schema fact when its definition changed, and re-read a keyed table whose new column
        holds values walflow cannot know in the rows that existed before it (a per-row default, or a table
        rewritten since): an incremental snapshot of the table, so that the lake converges without anyone acting."""
        assert self._facts is not None
        rid = relation.relation_id
        fact = build_fact(
            schema, relation, self._ddl.apply(self._catalog.table(rid)), self._relation_lsn.get(rid, 0), self._facts.previous(rid),
            self._facts.previous_storage(rid),
        )
        produced, before = self._facts.observe(rid, fact)
        if produced is None or before is None:
            return
        older = {attnum for _n, attnum, _f, _k in before.fields}
        # a whole read of the table (its snapshot, or a re-read) since the column was added gives its rows' values
        older |= self._rereads.covered(schema.schema, schema.table) if self._rereads is not None else set()
        unknown = [name for name, attnum, _f, known in produced.fields if not known and attnum not in older]
        if not unknown:
            return
        if not produced.key:
            log.warning(
                "connector %s: table %s gained column(s) %s whose values in the rows that existed before walflow cannot "
                "know (a default evaluated per row, or a table rewritten since), and it has no key to re-read it by; the "
                "lake job stops at this table with the fix",
                self.config.name, schema.data_collection, unknown,
            )
            return
        if self._rereads is None:
            log.warning("connector %s: table %s is not re-read (column(s) %s added with values walflow cannot know in the "
                        "existing rows): the connector has no state table (its setup never ran)", self.config.name, schema.data_collection, unknown)
            return
        self._rereads.start(schema.schema, schema.table, f"column(s) {unknown} added with values walflow cannot know in the existing rows", True, produced.lsn)

    def _slot(self, conn: psycopg.Connection, database: str) -> Any:
        """The connector's slot, checked; one another process is using is tried again ``slot.max.retries`` times,
        ``slot.retry.delay.ms`` apart, as Debezium tries it (without the setting: it fails at once)."""
        config = self.config
        tries = config.slot_max_retries or 0
        while True:
            try:
                return check_slot(conn, config, database, missing_ok=False)
            except SlotError as exc:
                if tries <= 0 or "in use by another process" not in str(exc):
                    raise
                tries -= 1
                log.warning("connector %s: %s; trying again in %d ms (%d more time(s))", config.name, exc, config.slot_retry_delay_ms, tries)
                time.sleep(config.slot_retry_delay_ms / 1000)

    def _blocking_snapshots(self, inc: IncrementalSnapshots, summary: BatchSummary) -> None:
        """Debezium's blocking snapshots: streaming pauses after the signal's transaction, the tables are read
        whole as an initial snapshot reads them (their current rows, ``r`` events with its markers), and streaming
        resumes with the next transaction. The signal's status is ``running`` meanwhile, and ``completed`` once the
        batch's records are acknowledged."""
        while inc.blocking:
            signal_id, names = inc.blocking.pop(0)
            plans = plan_tables(self._catalog_conn, self.config, only=[re.escape(name) for name in names])
            log.info("connector %s: blocking snapshot %s of %s: streaming paused", self.config.name, signal_id, ", ".join(names))
            inc.store.put(signal_key(signal_id), {"status": "running", "type": "blocking", "tables_left": names, "rows": 0, "chunks": 0, "at_ms": now_ms()})
            result = InitialSnapshot(self.config, self.conninfo, self.producer, snapshot_name=None, position_lsn=None).run(plans)
            summary.snapshot_rows += result.rows
            # written with the progress once Kafka acknowledged the rows: a batch that dies first takes it again
            inc.record_outcome(signal_id, {
                "status": "completed", "type": "blocking", "rows": result.rows, "rows_per_table": result.rows_per_table, "at_ms": now_ms(),
            })  # fmt: skip
            log.info("connector %s: blocking snapshot %s: %d row(s); streaming resumes", self.config.name, signal_id, result.rows)

    def _incremental(self) -> IncrementalSnapshots:
        """The batch's incremental snapshots, started on first use (a signal, saved progress, or a re-read)."""
        if self._inc is None:
            config = self.config
            # its own autocommit connection: the stream connection holds the peek's transaction open
            inc_store = self._store(self._catalog_conn)
            self._inc = IncrementalSnapshots(
                config, inc_store, self._catalog_conn, self.producer, self.serializer, chunk_hook=self._chunk_hook, reader=self._reader_factory()
            )
            self.events.inc = self._inc
        return self._inc

    def _warn_uncaptured(self, relation: Relation) -> None:
        """Say so when a table that was captured no longer is: renamed or moved out of the filters.

        pgoutput sends only the publication's tables, and a ``filtered`` publication holds exactly the tables
        the filters captured when setup ran, so one of them failing the filters now was renamed (the publication
        follows the table's OID, the filters its name). Its changes are skipped, as Debezium skips a table that
        leaves the include list; the warning is what tells the operator before a consumer notices the silence.
        """
        rid = relation.relation_id
        if self.config.signal_table == (relation.namespace, relation.name):
            return  # published for its signals, never captured
        was_captured = self._captured_before.get(rid, False)
        if not (was_captured or self.config.publication_autocreate_mode == "filtered") or rid in self._uncaptured_warned:
            return
        self._uncaptured_warned.add(rid)
        log.warning(
            "connector %s: table %s.%s (OID %d) is in publication %s but no longer captured by the table/schema "
            "include and exclude lists (renamed or moved?); its changes are skipped. Add the new name to "
            "table.include.list to capture it, or re-run %s__setup so the publication matches the filters.",
            self.config.name,
            relation.namespace,
            relation.name,
            rid,
            self.config.publication_name,
            self.config.name,
        )


#: Rows of incremental-snapshot chunks selected per round (several chunks between one flush and the next), and
#: about how much memory their rows may take (wide rows make a round of fewer rows). Each round ends with a flush, a
#: save of the progress and a move of the slot, a pause of the whole pipeline: 60,000 rows a round made a 1M-row
#: snapshot 5% faster than 20,000 (176-179k against 158-170k rows/s in alternating runs, 2026-11-25).
ROUND_ROWS = 60_000
ROUND_BYTES = 64 << 20


def _stopped_at(exc: ConversionError, lsn: int, xid: int) -> ConversionError:
    """A value the stream cannot convert, with where it is and the way past it."""
    return ConversionError(
        f"{exc}, in the change at LSN {lsn_to_str(lsn)} of transaction {xid}. The stream stops before that transaction "
        "(the slot stays at the end of the one before it) and every later run stops there too, until the column is left "
        "out of the events with column.exclude.list (the table's other columns and every other table then stream on; "
        "an incremental snapshot brings the column back once it is included again). PostgreSQL printed this value, so "
        "walflow should convert it: please report it as a walflow bug with the value."
    )


def _quote_publication(name: str) -> str:
    # publication_names is parsed as an identifier list by pgoutput, so names needing quotes get them.
    if name.isidentifier() and name == name.lower():
        return name
    return '"' + name.replace('"', '""') + '"'
