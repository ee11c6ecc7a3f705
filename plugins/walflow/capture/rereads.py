"""Re-reads walflow starts itself, so that the lake equals the source after changes of rows that no event carries.

A table whose rows changed without change events (:mod:`walflow.source.watch`: a rewrite, another relation under its
name, a renamed enum value, a column dropped and added again; a new column whose existing rows' values the schema
facts cannot know; changes made while the table was under another name) is re-read: an incremental snapshot of the
whole table, queued like an ``execute-snapshot`` signal of its exact name, in the task log, the batch's summary
(``rereads``) and ``walflow status``. Its rows reach the topic as Debezium's incremental snapshot rows do.

A re-read also ends what the lake holds of the table from before it, since rows can be *gone* too (a key that a
rewrite changed, the rows of a table dropped and created again): once the re-read completes, a *sweep* fact on the
schema topic tells the lake to remove every row of the table whose source position is older than the sweep's
position, as a truncate at that position would (:mod:`walflow.lake.apply`). The position is chosen so that every
change the table had before the re-read was decided is older, and every change the re-read's snapshots may have
missed is newer: it is the end of the last commit the stream read before the first transaction that committed after
the decision (the WAL insert position then). The lake's positions grow with the commit order (the larger of the
previous commit's end and the change's LSN), so every transaction committed before that point sits below it and every
later one at or above it; the re-read's rows sit at their chunks' high watermarks, later still.

A table without a primary key cannot be re-read by key: its topic gets a *stale* fact instead, and the lake stops at
that table with the cause and the fix, until the table gains a key (it is then re-read) or the lake is rebuilt.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import psycopg

from walflow.errors import WalflowError
from walflow.records.facts import STALE_KIND, SWEEP_KIND, fact_record
from walflow.source.pgoutput import lsn_to_str, str_to_lsn
from walflow.source.signals import SignalError, printable, signal_key
from walflow.source.watch import Observed, changed, observe

if TYPE_CHECKING:
    from walflow.kafka import EventProducer
    from walflow.source.pgoutput import Relation
    from walflow.source.state import StateStore

log = logging.getLogger("walflow.capture.stream")

#: state-table key prefix of what the catalog showed of each captured table (``watch:<schema>.<table>``)
WATCH_PREFIX = "watch:"
#: the signal ids of walflow's own re-reads (``walflow-reread:<schema>.<table>:<decision position>``)
SIGNAL_PREFIX = "walflow-reread:"
#: state-table key of the re-reads walflow started that the lake has not been told to sweep yet
REREADS_KEY = "rereads"
#: the WAL position now: where a re-read's decision falls (inserted, not only flushed: a transaction that committed
#: asynchronously is visible before its commit is flushed); a standby's replayed position
_NOW_SQL = (
    "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END)::text"
)


def sweep_record(schema: str, table: str, signal: str, position: int, due: int, reason: str) -> tuple[bytes, bytes]:
    """The schema topic's record of a sweep: rows of ``schema.table`` older than ``position`` (the commit part of a lake
    position) are gone once the lake has applied the re-read ``signal``, decided at WAL position ``due``."""
    return fact_record(SWEEP_KIND, schema, table, signal=signal, position=position, due=due, reason=reason)


def stale_record(schema: str, table: str, lsn: int, reason: str) -> tuple[bytes, bytes]:
    """The schema topic's record of a table without key whose rows changed without events at about ``lsn``."""
    return fact_record(STALE_KIND, schema, table, lsn=lsn, reason=reason)


class Rereads:
    """The re-reads one batch starts, and the sweeps it tells the lake about.

    :param store: the connector's state, on the catalog's autocommit connection.
    :param conn: that connection (the catalog, the WAL position now).
    :param incremental: gives the batch's incremental snapshots, started on first use.
    """

    def __init__(
        self,
        store: StateStore,
        conn: psycopg.Connection,
        producer: EventProducer,
        topic: str,
        connector: str,
        incremental: Any,
    ) -> None:
        self.store = store
        self.conn = conn
        self.producer = producer
        self.topic = topic
        self.connector = connector
        self._incremental = incremental
        #: signal id -> {"schema", "table", "due": LSN of the decision, "position": sweep position or None, "reason"}
        self.entries: dict[str, dict[str, Any]] = dict(store.get(REREADS_KEY) or {}) if store.exists() else {}
        self._dirty = False
        #: what the catalog showed this batch, by (schema, table), and which of those to remember at :meth:`save`
        self._seen: dict[tuple[str, str], Observed] = {}
        self._to_remember: dict[tuple[str, str], dict[str, Any]] = {}
        #: captured tables by relation OID, as the catalog names them now
        self._captured: dict[int, tuple[str, str]] = {}
        self._skipped: set[int] = set()
        #: names whose relation was renamed away (name -> its watch entry, marked with the name it has now)
        self._away: dict[str, dict[str, Any]] = {}
        self.checked_at = 0
        self._known: dict[str, Any] = {}
        #: what the batch summary lists: {"table", "signal", "reason"}
        self.started: list[dict[str, str]] = []

    # -- at the batch's start -------------------------------------------------------------------------------------
    def check(self, captured: dict[tuple[str, str], int]) -> None:
        """Compare what the catalog shows of the captured tables with what the previous batch saw, and re-read each
        table whose rows changed without events (:func:`walflow.source.watch.changed`)."""
        self._captured = {oid: name for name, oid in captured.items()}
        #: where this batch's re-reads are decided from: one decided since covers what happened before it
        self.checked_at = self._now()
        known = self._known = {k[len(WATCH_PREFIX) :]: v for k, v in self.store.prefixed(WATCH_PREFIX).items()}
        # the names the relations had when last seen: a relation under a new name was renamed (its new name's topic and
        # lake table hold only what was streamed under that name)
        named = {int(v["oid"]): n for n, v in known.items() if isinstance(v, dict) and v.get("oid") is not None}
        # the captured tables, and the relations seen before wherever they are now: one renamed to a name the filters
        # leave out is found there
        everything = observe(self.conn, sorted(set(captured.values()) | set(named)))
        now = {name: observed for name, observed in everything.items() if observed.oid in self._captured}
        current = {observed.oid: f"{s}.{t}" for (s, t), observed in everything.items()}
        # a name whose relation lives under another name now was renamed away: marked so, and re-read when the same
        # relation takes the name again (renamed back: what it went through under the other name reached none of the
        # name's topics), as it is when another relation takes it (a swap: another OID). A name whose relation is gone
        # stays as it was: the same name created again is another relation.
        names_now = set(current.values())
        self._away = {}
        for n, v in known.items():
            elsewhere = current.get(int(v.get("oid") or 0)) if isinstance(v, dict) and n not in names_now else None
            if elsewhere is not None and v.get("away") != elsewhere:
                self._away[n] = {**v, "away": elsewhere}
        for (schema, table), observed in sorted(now.items()):
            name = f"{schema}.{table}"
            raw = known.get(name)
            self._seen[(schema, table)] = observed
            if raw is None:
                self._to_remember[(schema, table)] = observed.to_state()  # first seen: what later batches compare with
                renamed_from = named.get(observed.oid)
                if renamed_from is not None and renamed_from != name:
                    self.start(
                        schema,
                        table,
                        f"it was renamed from {renamed_from}: its topic and lake table hold only what was streamed "
                        "under its new name",
                    )
                continue
            if isinstance(raw, dict) and raw.get("away") and int(raw.get("oid") or 0) == observed.oid:
                self.start(
                    schema,
                    table,
                    f"it was renamed to {raw['away']} and back: what it went through meanwhile reached none "
                    "of its topics",
                    observed.keyed,
                )
                continue
            try:
                before = Observed.from_state(raw)
            except (KeyError, TypeError, ValueError):
                self._to_remember[(schema, table)] = observed.to_state()
                continue
            kept = {k: raw[k] for k in ("stale", "covered") if k in raw}
            reason = changed(before, observed)
            if reason is None and raw.get("stale") and observed.keyed:
                reason = "it has a primary key now, and its rows changed without events while it had none"
            if reason is None:
                if raw.get("stale"):
                    continue  # still without a key: the lake keeps stopping at it
                if before != observed:
                    self._to_remember[(schema, table)] = {**observed.to_state(), **kept}
                continue
            self.start(schema, table, reason, observed.keyed)

    def start(
        self, schema: str, table: str, reason: str, keyed: bool | None = None, since: int | None = None
    ) -> str | None:
        """Re-read ``schema.table`` (an incremental snapshot, then a sweep), or for a table without a key tell the lake
        it is stale. Returns the re-read's signal id (None when there is none).

        :param since: the WAL position of the change that calls for it: a re-read of the table decided at or after it
            (this batch's, at its start) covers it already."""
        name = f"{schema}.{table}"
        if since is not None and any(
            e["schema"] == schema and e["table"] == table and e["due"] >= since for e in self.entries.values()
        ):
            return None
        observed = self._seen.get((schema, table))
        keyed = observed.keyed if keyed is None and observed is not None else keyed
        due = self._now()
        if not keyed:
            log.error(
                "connector %s: table %s changed its rows without change events (%s), and it has no primary key, "
                "so walflow cannot re-read it: the lake stops at this table until it has a key (walflow then re-reads "
                "it) or the lake is rebuilt (walflow reset %s --lake, then the setup DAG)",
                self.connector,
                printable(name),
                reason,
                self.connector,
            )
            self.producer.ensure_topic(self.topic)
            self.producer.send(self.topic, *stale_record(schema, table, due, reason))
            self._remember(schema, table, stale=True)
            return None
        signal = f"{SIGNAL_PREFIX}{name}:{due:X}"
        try:
            self._incremental().reread(signal, name, reason)
        except (WalflowError, SignalError) as exc:
            log.error(
                "connector %s: cannot re-read table %s (%s): %s; its lake table may differ from the source until it is "
                "snapshotted again",
                self.connector,
                printable(name),
                reason,
                exc,
            )
            return None
        self.entries[signal] = {"schema": schema, "table": table, "due": due, "position": None, "reason": reason}
        self._dirty = True
        self._remember(schema, table, stale=False)
        self.started.append({"table": name, "signal": signal, "reason": reason})
        return signal

    def _remember(self, schema: str, table: str, stale: bool) -> None:
        observed = self._seen.get((schema, table))
        if observed is not None:
            # the attributes a re-read reads whole (their values in every row), unless the table is stale
            covered = [] if stale else [attnum for attnum, *_rest in observed.attributes]
            self._to_remember[(schema, table)] = {**observed.to_state(), "stale": stale, "covered": covered}

    def covered(self, schema: str, table: str) -> set[int]:
        """The attributes whose values in every row the lake has or will have from a whole read of the table (the
        initial snapshot, or a re-read started at or before this batch): what a new column's unknown fill needs no
        re-read for."""
        pending = self._to_remember.get((schema, table))
        raw = pending if pending is not None else self._known.get(f"{schema}.{table}")
        return {int(a) for a in (raw or {}).get("covered") or ()}

    def _now(self) -> int:
        row = self.conn.execute(_NOW_SQL).fetchone()
        return str_to_lsn(str(row[0])) if row and row[0] else 0

    # -- while the batch streams ----------------------------------------------------------------------------------
    def other_name(self, relation: Relation, lsn: int) -> None:
        """A change under another name than the one a relation the connector captured had at the batch's start. Made
        while the table was renamed away and back, its events went to the other name's topic, or nowhere (a name the
        filters do not capture), and the lake table of its name needs them: the table is re-read. A table renamed
        (or dropped) since the batch started is left to the next batch, which sees it under its name then."""
        rid = relation.relation_id
        name = self._captured.get(rid)
        if name is None or name == (relation.namespace, relation.name) or rid in self._skipped:
            return
        self._skipped.add(rid)
        if name not in observe(self.conn, [rid]):  # its name in the catalog now
            # renamed since the batch started (or dropped), not back: the next batch finds it under its new name
            return
        self.start(
            *name,
            f"changes were made while it was named {relation.namespace}.{relation.name} (renamed away and back since)",
            since=lsn,
        )

    @property
    def next_due(self) -> int | None:
        """The lowest decision position of a re-read whose sweep position is not known yet."""
        due = [e["due"] for e in self.entries.values() if e.get("position") is None]
        return min(due) if due else None

    def reached(self, lsn: int, previous_commit_end: int) -> None:
        """The stream is about to read a transaction that commits at ``lsn`` (or has read everything up to ``lsn``),
        and ``previous_commit_end`` ends the last commit it read: the sweep position of every re-read decided at or
        before ``lsn``."""
        for signal, entry in self.entries.items():
            if entry.get("position") is None and entry["due"] <= lsn:
                entry["position"] = previous_commit_end
                self._dirty = True
                log.info(
                    "re-read %s of %s.%s: the lake's rows of the table older than %s are swept once it completes",
                    signal,
                    printable(entry["schema"]),
                    printable(entry["table"]),
                    lsn_to_str(previous_commit_end),
                )

    # -- once the batch's records are acknowledged ----------------------------------------------------------------
    def finish(self) -> int:
        """Write a sweep fact for each re-read that completed (the incremental snapshots' state was saved, so its rows
        were acknowledged); forget those stopped or failed (their tables are not swept: the lake may then hold rows the
        source no longer has, which the log says). Returns the facts written (flush before :meth:`save`)."""
        written = 0
        for signal, entry in list(self.entries.items()):
            status = (self.store.get(signal_key(signal)) or {}).get("status")
            if status == "completed" and entry.get("position") is not None:
                self.producer.ensure_topic(self.topic)
                self.producer.send(
                    self.topic,
                    *sweep_record(
                        entry["schema"],
                        entry["table"],
                        signal,
                        int(entry["position"]),
                        int(entry["due"]),
                        entry["reason"],
                    ),
                )
                entry["done"] = True
                written += 1
            elif status in ("stopped", "failed"):
                log.warning(
                    "re-read %s of %s.%s ended %s: its lake table is not swept and may hold rows the source no longer "
                    "has; send an execute-snapshot signal of the table to re-read it",
                    signal,
                    printable(entry["schema"]),
                    printable(entry["table"]),
                    status,
                )
                entry["done"] = True
        return written

    def save(self) -> None:
        """Remember the sweeps written (forgotten) and those still to come, and what the catalog showed."""
        done = [s for s, e in self.entries.items() if e.get("done")]
        for signal in done:
            del self.entries[signal]
            self._dirty = True
        if self._dirty:
            if self.entries:
                self.store.put(REREADS_KEY, self.entries)
            else:
                self.store.delete(REREADS_KEY)
            self._dirty = False
        for (schema, table), value in self._to_remember.items():
            self.store.put(f"{WATCH_PREFIX}{schema}.{table}", value)
        self._to_remember.clear()
        for name, value in self._away.items():
            self.store.put(f"{WATCH_PREFIX}{name}", value)
        self._away = {}


def remember(store: StateStore, seen: dict[tuple[str, str], Observed], replace: bool) -> None:
    """Setup: what the catalog showed of tables (``seen``, from :func:`walflow.source.watch.observe`), for the next
    batch to compare with; with ``replace`` (their rows were just snapshotted, and ``seen`` was read before the
    snapshot, so that a change between the two is found again rather than taken as the start) over what an earlier
    batch saw, else only for tables never seen (a change since the last batch must still be found by the next one)."""
    known = set() if replace else {k[len(WATCH_PREFIX) :] for k in store.prefixed(WATCH_PREFIX)}
    for (schema, table), observed in seen.items():
        if f"{schema}.{table}" not in known:
            covered = [attnum for attnum, *_rest in observed.attributes] if replace else []
            store.put(f"{WATCH_PREFIX}{schema}.{table}", {**observed.to_state(), "covered": covered})
