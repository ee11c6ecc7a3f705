"""What a stream batch checks and moves around its read of the slot: whether it may stream, the slot (waited for
while another process holds it), what it captures (drift), where a round reads up to, the slot's advance, and the
slot's health once advanced."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import psycopg

from walflow.capture.batches import BatchSummary
from walflow.capture.context import CaptureContext
from walflow.capture.drift import check_claims, check_publication, check_topics, record_claim
from walflow.config.connector import ConnectorConfig
from walflow.errors import SlotError
from walflow.source.health import assess_slot_health, health_limits, slot_health
from walflow.source.lsn import Lsn
from walflow.source.publication import list_tables, publication_tables
from walflow.source.slot import SlotInfo, check_slot
from walflow.source.state import StateStore

log = logging.getLogger("walflow.capture.stream")

#: Seconds a round waits for the WAL to be flushed up to where its read-only windows' rows are due.
READ_ONLY_FLUSH_WAIT_S = 5.0


@dataclass(frozen=True)
class CapturedTables:
    """What the drift check found the batch captures.

    :param tables: the captured tables by (schema, table), with their relation OIDs.
    :param added: tables the publication lacked and the check put back (their changes before were never decoded).
    :param topic_owners: each captured table's topic (two tables on one topic fail).
    """

    tables: dict[tuple[str, str], int]
    added: set[tuple[str, str]]
    topic_owners: dict[str, str]


def may_stream(config: ConnectorConfig, store: StateStore, summary: BatchSummary) -> bool:
    """Whether this connector streams now: not with ``snapshot.mode=initial_only``, not before its initial
    snapshot completed (changes could otherwise get ahead of snapshot rows)."""
    snapshot_state = store.get("snapshot")
    if config.snapshot_mode == "initial_only":
        log.info("connector %s: snapshot.mode=initial_only, so it does not stream", config.name)
        summary.stopped_by = "snapshot.mode=initial_only"
        return False
    if snapshot_state and snapshot_state.get("status") == "running":
        raise SlotError(
            f"the initial snapshot of connector {config.name!r} has not completed (a setup run is taking it, "
            f"or died while taking it). Streaming now could put changes ahead of snapshot rows; run "
            f"{config.name}__setup until it succeeds, then stream."
        )
    return True


def wait_for_slot(conn: psycopg.Connection, config: ConnectorConfig, database: str) -> SlotInfo:
    """The connector's slot, checked; one another process is using is tried again ``slot.max.retries`` times,
    ``slot.retry.delay.ms`` apart, as Debezium tries it (without the setting: it fails at once)."""
    tries = config.slot_max_retries or 0
    while True:
        try:
            slot = check_slot(conn, config, database, missing_ok=False)
            assert slot is not None  # missing_ok=False raises for a missing slot
            return slot
        except SlotError as exc:
            if tries <= 0 or "in use by another process" not in str(exc):
                raise
            tries -= 1
            log.warning(
                "connector %s: %s; trying again in %d ms (%d more time(s))",
                config.name,
                exc,
                config.slot_retry_delay_ms,
                tries,
            )
            time.sleep(config.slot_retry_delay_ms / 1000)


def check_drift(
    conn: psycopg.Connection, context: CaptureContext, store: StateStore, summary: BatchSummary
) -> CapturedTables:
    """Before reading the slot: the slot and prefix are this connector's, the publication still holds what it
    should (repaired when walflow manages it), and no two captured tables share a topic (see
    :mod:`walflow.capture.drift`)."""
    config = context.config
    if store.exists():
        check_claims(store, config)
        record_claim(store, config)  # connectors set up before claims were recorded claim on their next batch
    listed = {(s, t): oid for s, t, oid, *_ in list_tables(conn, context.filters)}
    captured = set(listed)
    guardrail = config.check_guardrail(len(captured))
    if guardrail:
        summary.warnings.append(guardrail)
    warnings, added = check_publication(conn, config, store if store.exists() else None, captured)
    summary.warnings.extend(warnings)
    published = publication_tables(conn, config.publication_name)
    if published is not None and not published[0]:
        captured &= published[2]
    return CapturedTables({name: listed[name] for name in captured}, added, check_topics(config, sorted(captured)))


def run_heartbeat_query(conn: psycopg.Connection, query: str) -> None:
    """Debezium's heartbeat.action.query, run before the batch reads; a failure is a warning only."""
    try:
        with conn.cursor() as cur:
            cur.execute(query.encode())  # the operator's own statement, run as written
    except psycopg.Error as exc:
        log.warning("heartbeat.action.query failed (%s); streaming continues", str(exc).strip())


def wal_end(conn: psycopg.Connection, needed: int | None) -> str:
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
            "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
            "ELSE pg_current_wal_flush_lsn() END)::text"
        ).fetchone()
        upto_text = str(row[0]) if row and row[0] else "0/0"
        if needed is None or Lsn.parse(upto_text) >= needed or time.monotonic() >= deadline:
            return upto_text
        time.sleep(0.02)


def advance_slot(conn: psycopg.Connection, slot_name: str, lsn: int) -> Lsn:
    """Move the slot's confirmed position to ``lsn``; return where the slot is now (the server never moves it
    past its flushed WAL, and a slot already further stays where it is), which is what the state records."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT end_lsn::text FROM pg_replication_slot_advance(%s, %s::pg_lsn)",
            (slot_name, str(Lsn(lsn))),
        )
        row = cur.fetchone()
    return Lsn.parse(row[0]) if row and row[0] else Lsn(lsn)


def measure_slot(conn: psycopg.Connection, config: ConnectorConfig, summary: BatchSummary) -> None:
    """The WAL the slot retains and its lag once this batch has advanced it, for the batch's record and history
    (which are written before :func:`check_retained_wal` judges them, so that a batch over the hard limit is still
    recorded)."""
    health = slot_health(conn, config.slot_name)
    if health.exists:
        summary.retained_wal_bytes, summary.lag_bytes = health.retained_wal_bytes, health.confirmed_lag_bytes


def check_retained_wal(
    conn: psycopg.Connection, config: ConnectorConfig, summary: BatchSummary, store: StateStore
) -> None:
    """Judge the slot's health after this batch advanced it: warn, or fail above the hard limit.

    Checked after the batch has streamed and advanced the slot, so the check never stops the one thing that
    lets the server recycle WAL: a slot still above the limit then is one that does not keep up. The same
    judgement as ``walflow status`` (:func:`walflow.source.health.assess_slot_health`).
    """
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
