"""The setup step of a connector: server checks, publication, signal and state tables, slot, initial snapshot.

``snapshot.mode`` decides whether a snapshot runs (the reference's semantics, where "offsets" are walflow's
state table and slot):

- ``initial``: when no snapshot of this connector completed yet;
- ``always``: at every setup run;
- ``never`` / ``no_data``: never; streaming starts at the slot's creation;
- ``initial_only``: like ``initial``, then no streaming: the slot is dropped after the snapshot and stream
  runs skip;
- ``when_needed``: like ``initial``, and also when the slot is missing or has lost WAL (the only case in
  which walflow recreates a slot, because the user asked for it).

A slot that existed before (the state table records a completed or skipped snapshot) and is gone now means
changes may have been missed. Setup then refuses to go on, whatever the mode, except ``when_needed`` and
``always``, which re-read every table into a new slot (with a warning in the log). ``initial_only`` drops its
slot on purpose and never recreates it.

A snapshot that did not complete (the task died) is taken again from the start at the next setup run; until
one completes, stream runs refuse to start, so no stream event can overtake a snapshot row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from walflow.capture.drift import KeyRegistry, check_claims, check_topics, record_claim, record_publication
from walflow.capture.notifications import INITIAL, Notifier
from walflow.capture.rereads import remember
from walflow.capture.schema_facts import SchemaFacts, catalog_fact, start_record
from walflow.capture.snapshot import InitialSnapshot, create_slot_with_snapshot
from walflow.capture.snapshot_tables import SnapshotError, plan_tables
from walflow.config.connector import ConnectorConfig
from walflow.config.filters import Filters
from walflow.errors import SlotError
from walflow.kafka import EventProducer, topic_ends, use_topic_creation
from walflow.records.events import now_ms
from walflow.source.connection import connect, quote_table
from walflow.source.locks import release_slot_lock, try_lock_slot
from walflow.source.prepare import SetupReport, setup_source
from walflow.source.publication import list_tables
from walflow.source.slot import check_slot, create_slot, enable_failover
from walflow.source.state import StateStore
from walflow.source.watch import observe
from walflow.transforms.producer import with_transforms

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
            f"signal table {schema}.{table} ('signal.data.collection') does not exist, and with 'read.only: true' walflow "
            f"creates nothing in the source: create it on the primary (CREATE TABLE {schema}.{table} (id varchar(42) PRIMARY "
            "KEY, type varchar(32) NOT NULL, data varchar(2048) NULL) and add it to the publication), or leave the key out "
            "and signal through Kafka ('signal.enabled.channels: kafka')"
        )
    conn.execute(
        sql.SQL("CREATE TABLE {} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048) NULL)").format(
            quote_table(schema, table)
        )
    )
    log.info("created signal table %s.%s", schema, table)
    return True


#: Snapshot states after which stream runs may have read the slot: losing the slot then may lose changes.
STREAMED_STATES = ("completed", "skipped")
#: Modes that re-read every table when the slot has to be created again, so nothing can be missed.
REREADING_MODES = ("when_needed", "always")


def lost_slot_error(config: ConnectorConfig, previous: dict[str, Any] | None) -> SlotError | None:
    """The error a setup run must stop with when the slot is missing, or ``None`` when creating it is safe.

    Creating it is safe when no stream run can have read the old slot (no snapshot state, or a snapshot that never
    completed: stream runs refuse to start until it does) and when the mode re-reads all data into the new slot.
    """
    status = (previous or {}).get("status")
    if status not in STREAMED_STATES or config.snapshot_mode in REREADING_MODES:
        return None
    if config.snapshot_mode == "initial_only" and status == "completed":
        return None  # dropped on purpose after the snapshot; never recreated (see ConnectorSetup.run)
    return SlotError(
        f"replication slot {config.slot_name!r} is gone although connector {config.name!r} has streamed from it "
        f"(snapshot state {status!r}): changes made since its last confirmed position may have been missed. walflow "
        f"never recreates a slot silently, and snapshot.mode={config.snapshot_mode!r} would not re-read the data. Set "
        "'snapshot.mode' to 'when_needed' (or 'always') and run the setup again to re-read the tables into a new slot."
    )


def snapshot_needed(config: ConnectorConfig, state: dict[str, Any] | None, slot_missing: bool) -> bool:
    mode = config.snapshot_mode
    completed = bool(state) and state.get("status") == "completed"  # type: ignore[union-attr]
    if mode in ("never", "no_data"):
        return False
    if mode == "always":
        return True
    if mode == "when_needed":
        return not completed or slot_missing
    return not completed  # initial, initial_only


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
        config = self.config
        conn = connect(
            self.conninfo, application_name=f"walflow:{config.name}:setup", initial_statements=config.database_initial_statements
        )
        state_conn = None
        try:
            try_lock_slot(conn, config)  # the stream cannot run while the snapshot is taken
            if self.state_conninfo is not None:
                state_conn = connect(self.state_conninfo, application_name=f"walflow:{config.name}:state")
            store = StateStore(state_conn or conn, config.name, config.state_table)
            self._store = store
            # refusals first, before any DDL: another connector's slot or prefix, tables sharing a topic
            check_claims(store, config)
            check_topics(config, [(s, t) for s, t, *_ in list_tables(conn, Filters(config))])
            ensure_signal_table(conn, config)
            report = setup_source(conn, config, create_slot_now=False)
            store.ensure()
            record_claim(store, config)
            record_publication(store, conn, config)
            # setup accepts the tables' current keys: a stream batch refuses a key that changed shape until then
            KeyRegistry(store).accept_all(t.schema for t in plan_tables(conn, config))
            if config.walflow_lake_enabled:
                # what the first batch compares the catalog with, to find rows changed without events (walflow.capture.rereads)
                remember(store, observe(conn, [oid for _s, _t, oid, *_ in list_tables(conn, Filters(config))]), replace=False)
            previous = store.get(SNAPSHOT_KEY)
            database = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
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
                        "(snapshot.mode=%s); changes between the old slot's position and now reach Kafka as snapshot rows",
                        config.slot_name,
                        config.name,
                        config.snapshot_mode,
                    )
            result: dict[str, Any] = report.as_dict()
            if slot is None and config.snapshot_mode == "initial_only" and (previous or {}).get("status") == "completed":
                # the snapshot was taken and the slot dropped on purpose: a new slot would retain WAL nobody reads
                result["snapshot"] = {"ran": False, "reason": "snapshot.mode=initial_only: snapshot already completed"}
                return result
            if not snapshot_needed(config, previous, slot is None):
                if slot is None:
                    report.slot_confirmed_lsn = create_slot(conn, config.slot_name, config.slot_failover)
                    report.slot_created = True
                    log.info("created replication slot %s at %s", config.slot_name, report.slot_confirmed_lsn)
                else:
                    report.slot_confirmed_lsn = slot.confirmed_flush_lsn
                if config.snapshot_mode in ("never", "no_data") and not previous:
                    store.put(SNAPSHOT_KEY, {"status": "skipped", "mode": config.snapshot_mode, "at_ms": now_ms()})
                    self._notify_skipped()
                result = report.as_dict()
                result["snapshot"] = {"ran": False, "reason": f"snapshot.mode={config.snapshot_mode}"}
                return result
            # Whether a stream has read this slot: then it holds changes not yet in Kafka (deletes, truncates, the
            # tables this snapshot leaves out) and must never be replaced, even if this snapshot fails. A slot that
            # an interrupted snapshot created is one nothing has read.
            interrupted = (previous or {}).get("status") == "running"
            streamed_slot = slot is not None and (bool((previous or {}).get("streamed_slot")) if interrupted else True)
            store.put(SNAPSHOT_KEY, {"status": "running", "mode": config.snapshot_mode, "started_ms": now_ms(), "streamed_slot": streamed_slot})
            summary = self._snapshot(conn, report, slot_exists=slot is not None, previous=previous)
            store.put(
                SNAPSHOT_KEY,
                {
                    "status": "completed",
                    "mode": config.snapshot_mode,
                    "completed_ms": now_ms(),
                    "position_lsn": summary["position_lsn"],
                    "rows": summary["rows"],
                    "tables": summary["tables"],
                },
            )
            if config.snapshot_mode == "initial_only":
                conn.execute("SELECT pg_drop_replication_slot(%s)", (config.slot_name,))
                log.info("snapshot.mode=initial_only: dropped slot %s; this connector does not stream", config.slot_name)
            result = report.as_dict()
            result["snapshot"] = {"ran": True, **summary}
            return result
        finally:
            if state_conn is not None:
                state_conn.close()
            release_slot_lock(conn)
            conn.close()

    def _notify_skipped(self) -> None:
        """Debezium's SKIPPED notification of a connector that starts without a snapshot of its data."""
        if not self.config.notification_enabled_channels:
            return
        producer = None
        if "sink" in self.config.notification_enabled_channels:
            producer = self.producer_factory()
            use_topic_creation(producer, self.config)
            producer = with_transforms(producer, self.config)
        try:
            Notifier(self.config, producer).notify(INITIAL, "SKIPPED")
            if producer is not None:
                producer.flush(self.config.walflow_kafka_flush_timeout_s)
        finally:
            if producer is not None:
                producer.close()

    def _snapshot(self, conn: psycopg.Connection, report: SetupReport, *, slot_exists: bool, previous: dict[str, Any] | None) -> dict[str, Any]:
        config = self.config
        only = config.snapshot_include_collection_list or None
        tables = plan_tables(conn, config, only=only)
        self.snapshot_started = True
        if self._on_snapshot_start is not None:
            self._on_snapshot_start(len(tables))
        producer = self.producer_factory()
        use_topic_creation(producer, self.config)
        producer = with_transforms(producer, self.config)
        try:
            return self._snapshot_with(conn, report, producer, tables, slot_exists=slot_exists, previous=previous)
        finally:
            # everything it sent was flushed on success; on a failure what it still holds is dropped (nothing of an
            # incomplete snapshot counts, the next setup run takes it again)
            producer.close()

    def _snapshot_with(
        self, conn: psycopg.Connection, report: SetupReport, producer: EventProducer, tables: list[Any], *, slot_exists: bool, previous: dict[str, Any] | None
    ) -> dict[str, Any]:
        config = self.config
        producer.check_reachable()
        # where a lake table without offsets of its own starts: the ends of the table topics that already hold
        # records (after `walflow reset`), read before the snapshot writes its rows; a new topic starts at 0
        starts = topic_ends(producer.settings, sorted({t.schema.topic for t in tables})) if config.walflow_lake_enabled else None
        for table in tables:
            producer.ensure_topic(table.schema.topic)
        recreate = slot_exists and previous is not None and previous.get("status") == "running" and not previous.get("streamed_slot")
        if recreate:
            # The last snapshot died before completing, and stream runs refused to start since: nothing read
            # this slot (it was created for that snapshot), so it is replaced by one whose exported snapshot the
            # new snapshot reads (no overlap). A slot a stream has read is kept: the snapshot reads beside it, as
            # any snapshot of a connector whose slot exists does.
            conn.execute("SELECT pg_drop_replication_slot(%s)", (config.slot_name,))
            log.info("previous snapshot did not complete: recreating slot %s to snapshot again from the start", config.slot_name)
            slot_exists = False
        # what the catalog shows of the tables before the snapshot reads them: the next batch compares with it, so that
        # a rewrite committed once the snapshot's transaction ended is found (walflow.capture.rereads)
        seen = observe(conn, [table.catalog.oid for table in tables]) if config.walflow_lake_enabled else {}
        if not slot_exists:
            repl, consistent_point, snapshot_name = create_slot_with_snapshot(self.conninfo, config.slot_name, config.slot_failover)
            report.slot_created = True
            try:
                runner = InitialSnapshot(config, self.conninfo, producer, snapshot_name=snapshot_name, position_lsn=consistent_point, progress=self._progress, fault_hook=self._fault)
                summary = runner.run(tables)
            finally:
                repl.close()
        else:
            runner = InitialSnapshot(config, self.conninfo, producer, snapshot_name=None, position_lsn=None, progress=self._progress, fault_hook=self._fault)
            summary = runner.run(tables)
        facts = None
        if config.walflow_lake_enabled and runner.position_lsn is not None:
            # the definitions the snapshot read, for the lake (walflow.capture.schema_facts): what a later rename or re-added
            # column is told apart from
            facts = SchemaFacts(self._store, producer, config.schema_topic)
            for table in tables:
                facts.observe(table.catalog.oid, catalog_fact(table.schema, table.catalog, runner.position_lsn))
            remember(self._store, seen, replace=True)
            if starts is not None:
                producer.send(config.schema_topic, *start_record(config.name, starts, runner.position_lsn))
        producer.flush(config.walflow_kafka_flush_timeout_s)
        if facts is not None:
            facts.save()
        info = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
        ).fetchone()
        report.slot_confirmed_lsn = info[0] if info else None
        if not tables:
            log.warning("snapshot: no captured table matched; nothing was read")
        return summary.as_dict()


__all__ = ["ConnectorSetup", "SnapshotError", "ensure_signal_table", "snapshot_needed"]
