"""The setup step of a connector: server checks, publication, signal and state tables, slot, initial snapshot.

Whether a snapshot runs, and what a lost slot means, is :mod:`walflow.capture.snapshot_mode`'s to decide
(``snapshot.mode``); this module does what it decides. A snapshot that did not complete (the task died) is taken
again from the start at the next setup run; until one completes, stream runs refuse to start, so no stream event can
overtake a snapshot row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from walflow.capture.context import CaptureContext, CaptureHelpers
from walflow.capture.drift import KeyRegistry, check_claims, check_topics, record_claim, record_publication
from walflow.capture.notifications import INITIAL, Notifier
from walflow.capture.rereads import remember
from walflow.capture.schema_facts import SchemaFacts, catalog_fact, start_record
from walflow.capture.snapshot import InitialSnapshot, SnapshotSummary, create_slot_with_snapshot
from walflow.capture.snapshot_mode import (
    REREADING_MODES,
    STREAMED_STATES,
    ConnectorSetupReport,
    SnapshotOutcome,
    lost_slot_error,
    snapshot_needed,
)
from walflow.capture.snapshot_tables import SnapshotError, SnapshotTable, plan_tables
from walflow.config.connector import ConnectorConfig
from walflow.config.filters import Filters
from walflow.errors import SlotError
from walflow.kafka import EventProducer, topic_ends
from walflow.records.events import now_ms
from walflow.source.connection import connect, quote_table
from walflow.source.locks import release_slot_lock, try_lock_slot
from walflow.source.prepare import SetupReport, setup_source
from walflow.source.publication import list_tables
from walflow.source.slot import SlotInfo, check_slot, create_slot, enable_failover
from walflow.source.state import StateStore
from walflow.source.watch import Observed, observe

log = logging.getLogger(__name__)

SNAPSHOT_KEY = "snapshot"


def ensure_signal_table(conn: psycopg.Connection, config: ConnectorConfig) -> bool:
    """Create the signal table (the reference's id, type, data columns) if it is configured and missing."""
    if not config.signal_table:
        return False
    schema, table = config.signal_table
    # by name, not through to_regclass(text): no identifier is ever spliced into SQL text unquoted
    exists = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s)",
        (schema, table),
    ).fetchone()
    if exists and exists[0]:
        return False
    if config.read_only:
        raise SlotError(
            f"signal table {schema}.{table} ('signal.data.collection') does not exist, and with 'read.only: true' "
            "walflow creates nothing in the source: create it on the primary "
            f"(CREATE TABLE {schema}.{table} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, "
            "data varchar(2048) NULL) and add it to the publication), or leave the key out "
            "and signal through Kafka ('signal.enabled.channels: kafka')"
        )
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048) NULL)"
        ).format(quote_table(schema, table))
    )
    log.info("created signal table %s.%s", schema, table)
    return True


class ConnectorSetup:
    """Run the setup of one connector. Idempotent: a second run with a completed snapshot changes nothing.

    :param producer_factory: builds the Kafka producer, only when a snapshot has to run.
    :param on_snapshot_start: called with the number of tables when a snapshot starts (the operator sends the
        ``SnapshotRunning`` metric then; the report at the end says how it went).
    :param state_conninfo: libpq connection string of the database that holds the state table
        (``walflow.state.conn.id``); without it, the state table is created in the source database.
    """

    def __init__(
        self,
        config: ConnectorConfig,
        conninfo: str,
        producer_factory: Callable[[], EventProducer],
        *,
        progress: Callable[[str], None] | None = None,
        fault_hook: Callable[[str], None] | None = None,
        on_snapshot_start: Callable[[int], None] | None = None,
        state_conninfo: str | None = None,
    ) -> None:
        self.config = config
        self.conninfo = conninfo
        self.state_conninfo = state_conninfo
        self.producer_factory = producer_factory
        self._progress = progress
        self._fault = fault_hook
        self._on_snapshot_start = on_snapshot_start
        #: whether this run started a snapshot (a failure after that aborted it)
        self.snapshot_started = False

    def run(self) -> dict[str, Any]:
        """Check, prepare the source and the state, settle the slot, then snapshot or not; the report as a dict.

        Everything runs under the slot's lock, so no stream run reads the slot while its snapshot is taken.
        """
        config = self.config
        conn = connect(
            self.conninfo,
            application_name=f"walflow:{config.name}:setup",
            initial_statements=config.database_initial_statements,
        )
        state_conn = None
        try:
            try_lock_slot(conn, config)  # the stream cannot run while the snapshot is taken
            if self.state_conninfo is not None:
                state_conn = connect(self.state_conninfo, application_name=f"walflow:{config.name}:state")
            store = StateStore(state_conn or conn, config.name, config.state_table)
            self._store = store
            self._refuse_early(conn, store)
            report = self._prepare(conn, store)
            previous = store.get(SNAPSHOT_KEY)
            slot = self._existing_slot(conn, previous)
            if (
                slot is None
                and config.snapshot_mode == "initial_only"
                and (previous or {}).get("status") == "completed"
            ):
                # the snapshot was taken and the slot dropped on purpose: a new slot would retain WAL nobody reads
                outcome = SnapshotOutcome.skipped("snapshot.mode=initial_only: snapshot already completed")
            elif not snapshot_needed(config, previous, slot is None):
                self._start_without_snapshot(conn, store, report, slot, previous)
                outcome = SnapshotOutcome.skipped(f"snapshot.mode={config.snapshot_mode}")
            else:
                outcome = SnapshotOutcome.taken(self._snapshot_recorded(conn, store, report, slot, previous))
            return ConnectorSetupReport(report, outcome).as_dict()
        finally:
            if state_conn is not None:
                state_conn.close()
            release_slot_lock(conn)
            conn.close()

    def _refuse_early(self, conn: psycopg.Connection, store: StateStore) -> None:
        """The refusals that need no change: a state table of a newer walflow, another connector's slot or topic
        prefix, tables sharing a topic. They come before any DDL, so a setup that cannot go on leaves nothing behind.
        """
        config = self.config
        store.check_format(write=False)
        check_claims(store, config)
        check_topics(config, [(s, t) for s, t, *_ in list_tables(conn, Filters(config))])

    def _prepare(self, conn: psycopg.Connection, store: StateStore) -> SetupReport:
        """Create or check what the source and the state table need before the slot: the signal table, the
        publication, the state table and this connector's claims on it, the tables' keys and (lake) their catalog.
        """
        config = self.config
        ensure_signal_table(conn, config)
        report = setup_source(conn, config, create_slot_now=False)
        store.ensure()
        store.check_format()
        record_claim(store, config)
        record_publication(store, conn, config)
        # this run's helpers, derived once (here, where the tables are first planned); the context that writes with
        # them is built when a producer is (only for a snapshot or a notification to Kafka)
        self._helpers = helpers = CaptureHelpers.for_config(config)
        # setup accepts the tables' current keys: a stream batch refuses a key that changed shape until then
        KeyRegistry(store).accept_all(t.schema for t in plan_tables(conn, helpers))
        if config.walflow_lake_enabled:
            # what the first batch compares the catalog with, to find rows changed without events
            # (walflow.capture.rereads)
            remember(
                store, observe(conn, [oid for _s, _t, oid, *_ in list_tables(conn, helpers.filters)]), replace=False
            )
        return report

    def _existing_slot(self, conn: psycopg.Connection, previous: dict[str, Any] | None) -> SlotInfo | None:
        """The slot as it is now (``None`` when missing), made a failover slot if the configuration asks for one.

        A missing slot that a stream has read stops the setup (:func:`lost_slot_error`) unless the mode re-reads every
        table into a new one, which is then logged as a warning.
        """
        config = self.config
        row = conn.execute("SELECT current_database()").fetchone()
        assert row is not None  # a SELECT without FROM returns its row
        database = row[0]
        slot = check_slot(conn, config, database, missing_ok=True)
        if slot is not None and config.slot_failover and slot.failover is False:
            enable_failover(self.conninfo, config.slot_name)
            log.info("replication slot %s is now a failover slot (slot.failover: true)", config.slot_name)
        if slot is None:
            error = lost_slot_error(config, previous)
            if error is not None:
                raise error
            if (previous or {}).get("status") in STREAMED_STATES and config.snapshot_mode in REREADING_MODES:
                log.warning(
                    "replication slot %s of connector %s is gone: creating a new one and re-reading every table "
                    "(snapshot.mode=%s); changes between the old slot's position and now reach Kafka as "
                    "snapshot rows",
                    config.slot_name,
                    config.name,
                    config.snapshot_mode,
                )
        return slot

    def _start_without_snapshot(
        self,
        conn: psycopg.Connection,
        store: StateStore,
        report: SetupReport,
        slot: SlotInfo | None,
        previous: dict[str, Any] | None,
    ) -> None:
        """No snapshot this run: create the slot if it is missing (streaming starts there), else report its position;
        a connector that never snapshots records it skipped the snapshot (stream runs wait for that) and says so.
        """
        config = self.config
        if slot is None:
            report.slot_confirmed_lsn = create_slot(conn, config.slot_name, config.slot_failover)
            report.slot_created = True
            log.info("created replication slot %s at %s", config.slot_name, report.slot_confirmed_lsn)
        else:
            report.slot_confirmed_lsn = slot.confirmed_flush_lsn
        if config.snapshot_mode in ("never", "no_data") and not previous:
            store.put(SNAPSHOT_KEY, {"status": "skipped", "mode": config.snapshot_mode, "at_ms": now_ms()})
            self._notify_skipped()

    def _snapshot_recorded(
        self,
        conn: psycopg.Connection,
        store: StateStore,
        report: SetupReport,
        slot: SlotInfo | None,
        previous: dict[str, Any] | None,
    ) -> SnapshotSummary:
        """Take the snapshot between two state records: ``running`` before (stream runs refuse to start until it
        completes), ``completed`` after; ``initial_only`` then drops the slot, as nothing will stream from it.
        """
        config = self.config
        # Whether a stream has read this slot: then it holds changes not yet in Kafka (deletes, truncates, the
        # tables this snapshot leaves out) and must never be replaced, even if this snapshot fails. A slot that
        # an interrupted snapshot created is one nothing has read.
        interrupted = (previous or {}).get("status") == "running"
        streamed_slot = slot is not None and (bool((previous or {}).get("streamed_slot")) if interrupted else True)
        store.put(
            SNAPSHOT_KEY,
            {
                "status": "running",
                "mode": config.snapshot_mode,
                "started_ms": now_ms(),
                "streamed_slot": streamed_slot,
            },
        )
        summary = self._snapshot(conn, report, slot_exists=slot is not None, previous=previous)
        store.put(
            SNAPSHOT_KEY,
            {
                "status": "completed",
                "mode": config.snapshot_mode,
                "completed_ms": now_ms(),
                "position_lsn": summary.position_lsn,
                "rows": summary.rows,
                "tables": summary.tables,
                "rows_left_out": summary.rows_left_out,
            },
        )
        if config.snapshot_mode == "initial_only":
            conn.execute("SELECT pg_drop_replication_slot(%s)", (config.slot_name,))
            log.info("snapshot.mode=initial_only: dropped slot %s; this connector does not stream", config.slot_name)
        return summary

    def _notify_skipped(self) -> None:
        """Debezium's SKIPPED notification of a connector that starts without a snapshot of its data."""
        if not self.config.notification_enabled_channels:
            return
        # a producer only for the sink channel: the log channel needs none
        context: CaptureHelpers = self._helpers
        producer = None
        if "sink" in self.config.notification_enabled_channels:
            context = self._helpers.writing_to(self.producer_factory())
            producer = context.producer
        try:
            Notifier(context).notify(INITIAL, "SKIPPED")
            if producer is not None:
                producer.flush(self.config.walflow_kafka_flush_timeout_s)
        finally:
            if producer is not None:
                producer.close()

    def _snapshot(
        self, conn: psycopg.Connection, report: SetupReport, *, slot_exists: bool, previous: dict[str, Any] | None
    ) -> SnapshotSummary:
        """Plan the tables, say the snapshot starts, and take it with a producer of its own (closed at the end)."""
        config = self.config
        only = config.snapshot_include_collection_list or None
        tables = plan_tables(conn, self._helpers, only=only)
        self.snapshot_started = True
        if self._on_snapshot_start is not None:
            self._on_snapshot_start(len(tables))
        context = self._helpers.writing_to(self.producer_factory())
        producer = context.producer
        try:
            return self._snapshot_with(conn, report, context, tables, slot_exists=slot_exists, previous=previous)
        finally:
            # everything it sent was flushed on success; on a failure what it still holds is dropped (nothing of an
            # incomplete snapshot counts, the next setup run takes it again)
            producer.close()

    def _snapshot_with(
        self,
        conn: psycopg.Connection,
        report: SetupReport,
        context: CaptureContext,
        tables: list[SnapshotTable],
        *,
        slot_exists: bool,
        previous: dict[str, Any] | None,
    ) -> SnapshotSummary:
        """The snapshot's steps: its topics, the slot it reads beside (or a new one), the catalog before it, the
        reading, what the lake keeps of it, the flush, and the slot's position for the report."""
        config = self.config
        producer = context.producer
        starts = self._prepare_topics(producer, tables)
        if slot_exists and self._drop_unread_slot(conn, previous):
            slot_exists = False
        # what the catalog shows of the tables before the snapshot reads them: the next batch compares with it, so that
        # a rewrite committed once the snapshot's transaction ended is found (walflow.capture.rereads)
        seen = observe(conn, [table.catalog.oid for table in tables]) if config.walflow_lake_enabled else {}
        summary, position_lsn = self._read_tables(report, context, tables, slot_exists=slot_exists)
        facts = None
        if config.walflow_lake_enabled and position_lsn is not None:
            facts = self._record_for_lake(producer, tables, position_lsn, seen, starts)
        producer.flush(config.walflow_kafka_flush_timeout_s)
        if facts is not None:
            facts.save()
        info = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
        ).fetchone()
        report.slot_confirmed_lsn = info[0] if info else None
        if not tables:
            log.warning("snapshot: no captured table matched; nothing was read")
        return summary

    def _prepare_topics(self, producer: EventProducer, tables: list[SnapshotTable]) -> dict[str, dict[int, int]] | None:
        """Check Kafka answers and the tables' topics exist; with the lake, the topics' ends before the snapshot."""
        config = self.config
        producer.check_reachable()
        # where a lake table without offsets of its own starts: the ends of the table topics that already hold
        # records (after `walflow reset`), read before the snapshot writes its rows; a new topic starts at 0
        starts = (
            topic_ends(producer.settings, sorted({t.schema.topic for t in tables}))
            if config.walflow_lake_enabled
            else None
        )
        for table in tables:
            producer.ensure_topic(table.schema.topic)
        return starts

    def _drop_unread_slot(self, conn: psycopg.Connection, previous: dict[str, Any] | None) -> bool:
        """Drop the existing slot if only an interrupted snapshot made it (nothing read it); whether it was dropped."""
        config = self.config
        if previous is None or previous.get("status") != "running" or previous.get("streamed_slot"):
            return False
        # The last snapshot died before completing, and stream runs refused to start since: nothing read
        # this slot (it was created for that snapshot), so it is replaced by one whose exported snapshot the
        # new snapshot reads (no overlap). A slot a stream has read is kept: the snapshot reads beside it, as
        # any snapshot of a connector whose slot exists does.
        conn.execute("SELECT pg_drop_replication_slot(%s)", (config.slot_name,))
        log.info(
            "previous snapshot did not complete: recreating slot %s to snapshot again from the start",
            config.slot_name,
        )
        return True

    def _read_tables(
        self, report: SetupReport, context: CaptureContext, tables: list[SnapshotTable], *, slot_exists: bool
    ) -> tuple[SnapshotSummary, int | None]:
        """Read the tables: without a slot, in the snapshot a new slot exports (its connection held open until the
        readers are done), else in one of their own beside the slot. The summary, and the WAL position read at."""
        config = self.config

        def reader(snapshot_name: str | None, position_lsn: int | None) -> InitialSnapshot:
            return InitialSnapshot(
                config,
                self.conninfo,
                context.producer,
                snapshot_name=snapshot_name,
                position_lsn=position_lsn,
                progress=self._progress,
                fault_hook=self._fault,
                context=context,
            )

        if slot_exists:
            runner = reader(None, None)
            return runner.run(tables), runner.position_lsn
        repl, consistent_point, snapshot_name = create_slot_with_snapshot(
            self.conninfo, config.slot_name, config.slot_failover
        )
        report.slot_created = True
        try:
            runner = reader(snapshot_name, consistent_point)
            return runner.run(tables), runner.position_lsn
        finally:
            repl.close()

    def _record_for_lake(
        self,
        producer: EventProducer,
        tables: list[SnapshotTable],
        position_lsn: int,
        seen: dict[tuple[str, str], Observed],
        starts: dict[str, dict[int, int]] | None,
    ) -> SchemaFacts:
        """What the lake keeps of the snapshot: the definitions it read (what a later rename or re-added column is
        told apart from, walflow.capture.schema_facts), the catalog seen before it, and where its tables start.

        The facts are saved by the caller once the producer has flushed.
        """
        config = self.config
        facts = SchemaFacts(self._store, producer, config.schema_topic)
        for table in tables:
            facts.observe(table.catalog.oid, catalog_fact(table.schema, table.catalog, position_lsn))
        remember(self._store, seen, replace=True)
        if starts is not None:
            producer.send(config.schema_topic, *start_record(config.name, starts, position_lsn))
        return facts


__all__ = [
    "ConnectorSetup",
    "ConnectorSetupReport",
    "SnapshotError",
    "SnapshotOutcome",
    "ensure_signal_table",
    "snapshot_needed",
]
