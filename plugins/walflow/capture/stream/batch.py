"""One bounded streaming batch: slot → pgoutput decoding → Debezium events → Kafka → slot advance.

A batch peeks the slot (``pg_logical_slot_peek_binary_changes``, which does not consume anything) through a
server-side cursor, so memory stays bounded whatever the size of a transaction. It stops at the WAL position
taken when it started, or after ``walflow.batch.max.events`` events / ``walflow.batch.max.seconds``, always
at a transaction boundary. Only when Kafka has acknowledged every record does it advance the slot, to the end
of the last transaction it fully produced. A crash anywhere before that repeats the batch: at-least-once
delivery, as with Debezium.

A batch is made of rounds: one round selects incremental-snapshot chunks (if any), streams up to the current WAL
position, flushes, advances the slot and saves the progress. Without a running incremental snapshot there is one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg

from walflow.capture.batches import BatchSummary, previous_batch_record, record_batch
from walflow.capture.context import CaptureContext
from walflow.capture.drift import KeyRegistry
from walflow.capture.incremental import STATE_KEY as INCREMENTAL_KEY
from walflow.capture.incremental import IncrementalSnapshots
from walflow.capture.rereads import Rereads
from walflow.capture.reselect import reselectors
from walflow.capture.schema_facts import SchemaFacts
from walflow.capture.stream.changes import ChangeEvents
from walflow.capture.stream.checks import (
    check_drift,
    check_retained_wal,
    may_stream,
    measure_slot,
    run_heartbeat_query,
    wait_for_slot,
)
from walflow.capture.stream.dispatch import Dispatcher
from walflow.capture.stream.relations import RelationSchemas
from walflow.capture.stream.resume import resume_point
from walflow.capture.stream.rounds import BatchRounds
from walflow.capture.stream.snapshots import BatchSnapshots
from walflow.config.connector import ConnectorConfig
from walflow.errors import ConversionError, DriftError, RecordTooLargeError, SourceUnavailableError
from walflow.kafka import EventProducer
from walflow.source.catalog import Catalog
from walflow.source.connection import ServerInfo, connect, server_info, server_timeline
from walflow.source.ddl_facts import PREFIX as DDL_PREFIX
from walflow.source.ddl_facts import TRIGGER as DDL_TRIGGER
from walflow.source.ddl_facts import DdlFacts, trigger_enabled
from walflow.source.locks import release_slot_lock, try_lock_slot
from walflow.source.lsn import Lsn
from walflow.source.signals import first_line
from walflow.source.slot import SlotInfo, check_synchronized_standbys
from walflow.source.state import StateStore

log = logging.getLogger(__name__)


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
        self.context = CaptureContext.for_task(config, producer)
        self.producer = self.context.producer
        #: turns the decoded changes into Debezium's records
        self.events = ChangeEvents(self.context)
        self._fault = fault_hook or (lambda stage: None)
        self._chunk_hook = chunk_hook
        #: the incremental and blocking snapshots and the Kafka signal channel (opened with the connections)
        self._batch_snapshots: BatchSnapshots | None = None
        self._dispatcher: Dispatcher | None = None
        #: an error at one change (a record Kafka cannot take, a table's key or topic drifting): the batch stops
        #: before that change's transaction, confirms what came before, then raises it
        self._stop_error: RecordTooLargeError | DriftError | ConversionError | None = None
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
        #: the captured tables' definitions as the catalog says them (read on the catalog connection)
        self._catalog: Catalog | None = None

    # -- public -----------------------------------------------------------------------------------
    def run(self) -> BatchSummary:
        """Stream one batch; the summary says what it did (and is recorded in the state table)."""
        config = self.config
        summary = BatchSummary(connector=config.name, slot=config.slot_name)
        started = time.monotonic()
        conn, catalog_conn = self._connect()
        try:
            if self.state_conninfo is not None:
                self._state_conn = connect(self.state_conninfo, application_name=f"walflow:{config.name}:state")
            self._batch_snapshots = BatchSnapshots(
                self.context,
                self.conninfo,
                catalog_conn,
                # its own autocommit connection: the stream connection holds the peek's transaction open
                self._store(catalog_conn),
                reader_conninfo=self.reader_conninfo,
                chunk_hook=self._chunk_hook,
                on_start=self._attach,
            )
            try_lock_slot(conn, config)
            store = self._store(conn)
            store.check_format()
            if not may_stream(config, store, summary):
                return summary
            info = server_info(conn)
            slot = self._preflight(conn, catalog_conn, store, summary, info)
            self._start_snapshots_and_signals(catalog_conn, store, summary)
            if config.heartbeat_action_query:
                run_heartbeat_query(conn, config.heartbeat_action_query)
            summary.start_lsn = slot.confirmed_flush_lsn
            slot_at = Lsn.parse(slot.confirmed_flush_lsn or "0/0")
            previous_batch = previous_batch_record(store)
            dispatcher = self._resume(conn, catalog_conn, store, summary, slot_at, previous_batch, started)
            self._stop_error = self._rounds(conn, info, summary, started, dispatcher, slot_at)
            measure_slot(conn, config, summary)
            self._record(store, summary, previous_batch, started)
            if self._stop_error is not None:
                raise self._stop_error
            check_retained_wal(conn, config, summary, store)
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
            if self._batch_snapshots is not None:
                self._batch_snapshots.close()
            catalog_conn.close()
            if self._state_conn is not None:
                self._state_conn.close()
            release_slot_lock(conn)
            conn.close()
        summary.seconds = round(time.monotonic() - started, 3)
        self._log_done(summary)
        return summary

    def _connect(self) -> tuple[psycopg.Connection, psycopg.Connection]:
        """The stream's connection (the peek's transaction) and the catalog's (autocommit: the state, the schemas,
        the snapshots' chunks), both with ``database.initial.statements``."""
        config = self.config
        statements = config.database_initial_statements
        conn = connect(self.conninfo, application_name=f"walflow:{config.name}:stream", initial_statements=statements)
        try:
            catalog_conn = connect(
                self.conninfo, application_name=f"walflow:{config.name}:catalog", initial_statements=statements
            )
        except BaseException:
            conn.close()
            raise
        return conn, catalog_conn

    def _rounds(
        self,
        conn: psycopg.Connection,
        info: ServerInfo,
        summary: BatchSummary,
        started: float,
        dispatcher: Dispatcher,
        slot_at: Lsn,
    ) -> RecordTooLargeError | DriftError | ConversionError | None:
        """The batch's rounds (:mod:`walflow.capture.stream.rounds`); returns the error that stopped them at one
        change, if one did."""
        rounds = BatchRounds(
            self.context,
            self.events,
            dispatcher,
            summary,
            started,
            snapshots=self._incremental,
            facts=self._facts,
            rereads=self._rereads,
            fault=self._fault,
        )
        rounds.run(conn, info, slot_at)
        return rounds.stop_error

    def _log_done(self, summary: BatchSummary) -> None:
        config = self.config
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

    # -- before reading -------------------------------------------------------------------------------------------
    def _preflight(
        self,
        conn: psycopg.Connection,
        catalog_conn: psycopg.Connection,
        store: StateStore,
        summary: BatchSummary,
        info: ServerInfo,
    ) -> SlotInfo:
        """The checks before the slot is read: the slot, the standbys it must wait for, drift, the broker; then the
        catalog the schemas are read from and the schema facts for the lake."""
        config = self.config
        slot = wait_for_slot(conn, config, info.database)
        check_synchronized_standbys(conn, slot)
        captured = check_drift(conn, self.context, store, summary)
        self._captured, self._added, self._topic_owners = captured.tables, captured.added, captured.topic_owners
        self._keys = KeyRegistry(self._store(catalog_conn)) if store.exists() else None
        self.producer.check_reachable()
        self.events.database = info.database
        self._catalog = Catalog(catalog_conn)
        if trigger_enabled(catalog_conn):
            log.info(
                "connector %s: keys as each DDL left them, from the event trigger %s (messages %r in the WAL)",
                config.name,
                DDL_TRIGGER,
                DDL_PREFIX,
            )
        else:
            log.info(
                "connector %s: keys from the catalog when the batch reaches a change of a redefined table (no DDL "
                "event trigger: install walflow's ddl_facts.sql as a superuser for keys as they were at each change)",
                config.name,
            )
        if config.walflow_lake_enabled:
            # the catalog's autocommit connection: the stream connection holds the peek's transaction open
            self._facts = SchemaFacts(self._store(catalog_conn), self.producer, config.schema_topic)
            log.info(
                "connector %s: schema facts for the lake from the catalog, read when a table's definition changes "
                "(topic %s)",
                config.name,
                config.schema_topic,
            )
        return slot

    def _start_snapshots_and_signals(
        self, catalog_conn: psycopg.Connection, store: StateStore, summary: BatchSummary
    ) -> None:
        """The re-reads the lake needs, the post processors, the incremental snapshots (saved progress or a signal
        table) and the Kafka signal channel, whose blocking snapshots run before the batch streams."""
        config = self.config
        if self._facts is not None and store.exists():
            self._rereads = Rereads(
                self._store(catalog_conn),
                catalog_conn,
                self.producer,
                config.schema_topic,
                config.name,
                self._snapshots().started,
            )
            self._rereads.check(self._captured)
            for schema, table in sorted(self._added):
                self._rereads.start(
                    schema,
                    table,
                    "it was not in the publication, so its changes were never decoded",
                    since=self._rereads.checked_at,
                )
        self.events.reselect = reselectors(config, lambda: catalog_conn)
        if config.signal_table or store.get(INCREMENTAL_KEY):
            self._snapshots().started()
        if "kafka" in config.signal_enabled_channels:
            self._snapshots().read_kafka_signals(summary)

    def _resume(
        self,
        conn: psycopg.Connection,
        catalog_conn: psycopg.Connection,
        store: StateStore,
        summary: BatchSummary,
        slot_at: Lsn,
        previous_batch: dict[str, Any],
        started: float,
    ) -> Dispatcher:
        """Where the batch resumes (:func:`~walflow.capture.stream.resume.resume_point`), and the dispatcher that
        reads from there, with the schemas and the DDL facts recorded up to there."""
        config = self.config
        events = self.events
        # Debezium's source.sequence starts with the end of the last commit it processed: none in a connector's
        # first run (its offsets hold none yet), otherwise what the previous batch read last
        events.previous_commit_lsn = previous_batch.get("last_commit_lsn")
        events.last_commit_us = previous_batch.get("last_commit_us")
        summary.timeline = server_timeline(conn)
        skip_before = resume_point(config.name, config.slot_name, slot_at, previous_batch, summary.timeline)
        # the DDL facts recorded up to where this batch starts reading (or skipping: those transactions' facts
        # are not read again)
        ddl = DdlFacts(self._store(catalog_conn) if store.exists() else None, max(slot_at, skip_before or 0))
        assert self._catalog is not None, "the catalog is read once the checks passed"
        schemas = RelationSchemas(
            self.context,
            self._catalog,
            ddl,
            topic_owners=self._topic_owners,
            keys=self._keys,
            facts=self._facts,
            rereads=self._rereads,
        )
        dispatcher = Dispatcher(
            config,
            events,
            summary,
            schema_of=schemas.schema,
            on_relation=schemas.on_relation,
            on_blocking=lambda inc: self._snapshots().run_blocking(inc, summary),
            ddl=ddl,
            rereads=self._rereads,
            skip_before=skip_before,
            start_lsn=slot_at,
            deadline=started + config.walflow_batch_max_seconds,
            fault=self._fault,
        )
        dispatcher.snapshots = self._incremental()
        self._dispatcher = dispatcher
        return dispatcher

    # -- after the rounds -----------------------------------------------------------------------------------------
    def _record(self, store: StateStore, summary: BatchSummary, previous_batch: dict[str, Any], started: float) -> None:
        """The batch's record in the state table: where it left the slot, its last commit, its last event."""
        events = self.events
        failures = self.context.failures
        if failures.count:
            summary.events_left_out = failures.count
            summary.warnings.extend(
                f"left out the event of table {d['table']} at {d['position']}: {d['reason']}"
                for d in failures.described
            )
        if events.last_emit is not None:
            op, table, lsn, ts_ms = events.last_emit
            summary.last_event = {"op": op, "table": table.data_collection, "lsn": str(Lsn(lsn)), "ts_ms": ts_ms}
        record_batch(
            store,
            summary,
            previous_batch,
            round(time.monotonic() - started, 3),
            events.previous_commit_lsn,
            events.last_commit_us,
            self.config.walflow_status_history_batches,
        )

    # -- helpers --------------------------------------------------------------------------------------------------
    def _snapshots(self) -> BatchSnapshots:
        assert self._batch_snapshots is not None, "the batch's snapshots start with its connections"
        return self._batch_snapshots

    def _incremental(self) -> IncrementalSnapshots | None:
        """The batch's incremental snapshots, if started (a signal, saved progress, or a re-read starts them)."""
        return self._batch_snapshots.incremental if self._batch_snapshots is not None else None

    def _attach(self, snapshots: IncrementalSnapshots) -> None:
        """Incremental snapshots started mid-batch (by a re-read): signals and window changes now reach them."""
        if self._dispatcher is not None:
            self._dispatcher.snapshots = snapshots

    def _store(self, source_conn: psycopg.Connection) -> StateStore:
        """The connector's state: in the state database when ``walflow.state.conn.id`` names one, otherwise in the
        source, on ``source_conn`` (the stream's connection before and after the peek, the catalog's during it)."""
        return StateStore(self._state_conn or source_conn, self.config.name, self.config.state_table)
