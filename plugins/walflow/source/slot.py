"""The replication slot: what the server says of it, the checks before it is read, and its creation."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg

from walflow.config.connector import ConnectorConfig
from walflow.errors import SlotError, SourceUnavailableError

log = logging.getLogger(__name__)


@dataclass
class SlotInfo:
    name: str
    plugin: str | None
    slot_type: str
    database: str | None
    active_pid: int | None
    restart_lsn: str | None
    confirmed_flush_lsn: str | None
    wal_status: str | None
    #: PostgreSQL 17+: synchronized to standbys (None before 17)
    failover: bool | None = None
    #: PostgreSQL 17+: a standby's copy of a primary's failover slot, not usable until the standby is promoted
    synced: bool | None = None


def slot_info(conn: psycopg.Connection, slot: str) -> SlotInfo | None:
    with conn.cursor() as cur:
        cur.execute(
            """
            SELECT slot_name, plugin, slot_type, database, active_pid, restart_lsn::text,
                   confirmed_flush_lsn::text, wal_status, (to_jsonb(s) ->> 'failover')::bool,
                   (to_jsonb(s) ->> 'synced')::bool
            FROM pg_replication_slots s WHERE slot_name = %s
            """,
            (slot,),
        )
        row = cur.fetchone()
    return SlotInfo(*row) if row else None


def check_slot(
    conn: psycopg.Connection, config: ConnectorConfig, database: str, *, missing_ok: bool
) -> SlotInfo | None:
    """Check the slot is a pgoutput logical slot of this database that nobody else consumes."""
    slot = slot_info(conn, config.slot_name)
    if slot is None:
        if missing_ok:
            return None
        raise SlotError(
            f"replication slot {config.slot_name!r} does not exist. It was dropped, or the server is a new primary "
            "after a failover: changes made since the last run may have been missed. walflow never recreates a slot "
            f"silently; re-run the setup DAG ({config.name}__setup) with a snapshot mode that re-reads the data "
            "('when_needed' or 'always')."
            + (
                ""
                if config.slot_failover
                else " To keep streaming across a failover instead, set 'slot.failover: true' (PostgreSQL 17+, "
                "standbys with sync_replication_slots): a promoted standby then has the slot (docs/operations.md)."
            )
        )
    if slot.slot_type != "logical" or slot.plugin != "pgoutput":
        raise SlotError(
            f"replication slot {slot.name!r} is a {slot.slot_type} slot with plugin {slot.plugin!r}; walflow needs a "
            "logical pgoutput slot. Choose another 'slot.name' or drop this slot."
        )
    if slot.database != database:
        raise SlotError(
            f"replication slot {slot.name!r} belongs to database {slot.database!r}, not {database!r}; choose another "
            "'slot.name'"
        )
    if slot.wal_status == "lost":
        raise SlotError(
            f"replication slot {slot.name!r} has lost required WAL (wal_status=lost, max_slot_wal_keep_size exceeded): "
            f"changes were missed. Drop the slot and re-run {config.name}__setup with a snapshot mode that re-reads "
            "the data."
        )
    if slot.synced and _in_recovery(conn):
        raise SlotError(
            f"replication slot {slot.name!r} on this standby is a synchronized copy of the primary's failover slot: it "
            "can be streamed from only once the standby is promoted. Point the connector's Connection at the primary, "
            "or, to capture from this standby, give the connector a slot of its own ('slot.name') and run its setup "
            "here"
        )
    if slot.active_pid is not None:
        raise SlotError(
            f"replication slot {slot.name!r} is in use by another process (PID {slot.active_pid}); a slot has one "
            "consumer at a time. Stop that consumer or give this connector its own 'slot.name'."
        )
    return slot


def create_slot(conn: psycopg.Connection, slot: str, failover: bool = False) -> str:
    """Create the logical pgoutput slot (``failover``: PostgreSQL 17's failover slot); return its consistent point LSN.

    On a hot standby (PostgreSQL 16+) the creation waits for the primary to log its running transactions, which it
    does at its next checkpoint or ``pg_log_standby_snapshot()``."""
    with conn.cursor() as cur:
        if failover:
            cur.execute(
                "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput', false, false, true)", (slot,)
            )
        else:
            cur.execute("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        row = cur.fetchone()
    assert row is not None
    return str(row[0])


def _in_recovery(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    assert row is not None  # a SELECT without FROM returns its row
    return bool(row[0])


def enable_failover(conninfo: str, slot: str) -> None:
    """Make an existing slot a failover slot (PostgreSQL 17's ``ALTER_REPLICATION_SLOT``, on a replication
    connection)."""
    from psycopg import sql

    try:
        with psycopg.connect(conninfo, autocommit=True, replication="database") as repl:
            repl.execute(
                sql.SQL("ALTER_REPLICATION_SLOT {} (FAILOVER true)").format(sql.Identifier(slot)), prepare=False
            )
    except psycopg.Error as exc:
        raise SlotError(
            f"cannot make replication slot {slot!r} a failover slot ('slot.failover: true'): {str(exc).strip()}"
        ) from None


def check_synchronized_standbys(conn: psycopg.Connection, slot: SlotInfo) -> None:
    """Before reading a failover slot: each standby slot the primary's ``synchronized_standby_slots`` lists must be
    there and streaming, for PostgreSQL decodes a failover slot only up to the WAL they confirmed, and otherwise
    waits, with no timeout, until they do.

    :raises SourceUnavailableError: (retried) naming the standby slots that hold the batch back and the fix.
    """
    if not slot.failover:
        return
    row = conn.execute("SELECT current_setting('synchronized_standby_slots', true), pg_is_in_recovery()").fetchone()
    setting = (row[0] or "").strip() if row else ""
    if not setting or (row and row[1]):
        return
    names = [name.strip().strip('"') for name in setting.split(",") if name.strip()]
    if "*" in names:
        return  # every physical slot: none in particular to check
    found: dict[str, bool] = dict(
        conn.execute(
            "SELECT slot_name, active_pid IS NOT NULL AND coalesce(wal_status, '') <> 'lost' FROM pg_replication_slots "
            "WHERE slot_type = 'physical' AND slot_name = ANY(%s)",
            (names,),
        ).fetchall()
    )
    waiting = [name for name in names if not found.get(name)]
    if waiting:
        raise SourceUnavailableError(
            f"replication slot {slot.name!r} is a failover slot, and the server decodes it only up to the WAL that the "
            f"standby slot(s) {', '.join(map(repr, waiting))} in synchronized_standby_slots confirmed; "
            f"{'they are' if len(waiting) > 1 else 'it is'} not streaming now (the standby is down or gone), so the "
            "batch would wait without end. Bring the standby back, or take its slot out of synchronized_standby_slots "
            "(ALTER SYSTEM SET synchronized_standby_slots = ...; SELECT pg_reload_conf()); the next run streams"
        )
