"""Debezium's transaction metadata: the transaction being streamed, and its BEGIN and END records.

With ``provide.transaction.metadata``, Debezium writes a BEGIN and an END record for each transaction to
``<prefix>.transaction`` and gives each change event a ``transaction`` block (its id, its order in the transaction and
in its table). :class:`TransactionRecords` does both for the records
:class:`~walflow.capture.stream.changes.ChangeEvents` builds; without the setting it only counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from walflow.capture.batches import BOOKKEEPING_IDS
from walflow.capture.context import CaptureContext
from walflow.records.envelope import java_hash_map_order
from walflow.source.pgoutput import PG_EPOCH_MICROS_FROM_UNIX, Begin

if TYPE_CHECKING:
    from walflow.capture.batches import BatchSummary


class Transaction:
    """The transaction being streamed: its identity and counters for the metadata records.

    Debezium 3.6 names every transaction record and event ``<txId>:<LSN>`` with the LSN of the record itself:
    BEGIN the LSN the slot reports for the BEGIN (on PostgreSQL 15+ that of the transaction's first change),
    each data event its own change's LSN, END the end of the commit record.
    """

    __slots__ = (
        "begin_lsn",
        "begun",
        "commit_ms",
        "commit_us",
        "final_lsn",
        "origin",
        "origin_lsn",
        "other_changes",
        "per_collection",
        "sources",
        "state_writes",
        "total",
        "xid",
    )  # fmt: skip

    def __init__(self, begin: Begin, begin_lsn: int) -> None:
        self.xid = begin.xid
        self.commit_us = begin.commit_ts + PG_EPOCH_MICROS_FROM_UNIX
        self.commit_ms = self.commit_us // 1000
        self.final_lsn = begin.final_lsn
        self.begin_lsn = begin_lsn
        self.total = 0
        self.per_collection: dict[str, int] = {}
        # The part of each table's source block that is the same for every event of this transaction.
        self.sources: dict[tuple[str, str], dict[str, Any]] = {}
        # the replication origin the transaction was replayed from (pgoutput's Origin message), if any
        self.origin: str | None = None
        self.origin_lsn: int | None = None
        #: whether the transaction wrote walflow's state table, and whether it changed anything else: one that only
        #: wrote the state table is walflow's bookkeeping, which Debezium (keeping offsets outside) never shows
        self.state_writes = False
        self.other_changes = False
        #: whether its BEGIN record was sent: it waits for the message after the Begin, which may be an Origin
        self.begun = False


class TransactionRecords:
    """The BEGIN and END records of the transactions a batch reads, and their change events' ``transaction`` block."""

    def __init__(self, context: CaptureContext) -> None:
        self.config = config = context.config
        self.producer = context.producer
        self.serializer = serializer = context.serializer
        #: whether Debezium's transaction metadata is on (provide.transaction.metadata)
        self.enabled = config.provide_transaction_metadata
        self._topic = config.transaction_topic
        self._key_json = serializer.prefix(context.fmt.tx_key_schema)
        self._value_json = serializer.prefix(context.fmt.tx_value_schema)

    def _record(self, payload: dict[str, Any]) -> None:
        ser = self.serializer
        self.producer.send(
            self._topic, ser.key(self._key_json, {"id": payload["id"]}), ser.value(self._value_json, payload)
        )

    def begin(self, tx: Transaction) -> None:
        """BEGIN, as Debezium sends it for every transaction it reads, even one whose changes are all filtered."""
        tx.begun = True
        if not self.enabled:
            return
        self.producer.ensure_topic(self._topic)
        begin_id = f"{tx.xid}:{tx.begin_lsn}"
        self._record(
            {"status": "BEGIN", "id": begin_id, "event_count": None, "data_collections": None, "ts_ms": tx.commit_ms}
        )

    def end(self, tx: Transaction, end_lsn: int, summary: BatchSummary | None = None) -> None:
        """END, with the transaction's counts per table; nothing for walflow's own bookkeeping."""
        if not tx.begun and tx.state_writes and not tx.other_changes:
            # walflow's own bookkeeping (a batch's state, a claim): not a transaction of the captured database
            if summary is not None:
                summary.bookkeeping_transactions += 1
                if len(summary.bookkeeping_xids) < BOOKKEEPING_IDS:
                    summary.bookkeeping_xids.append(tx.xid)
            return
        if not tx.begun:
            self.begin(tx)
        if not self.enabled:
            return
        counts = tx.per_collection
        # Debezium keeps the counts in a java.util.HashMap and lists them in its iteration order
        collections = [
            {"data_collection": name, "event_count": counts[name]} for name in java_hash_map_order(list(counts))
        ]
        self._record(
            {
                "status": "END",
                "id": f"{tx.xid}:{end_lsn}",
                "event_count": tx.total,
                "data_collections": collections,
                "ts_ms": tx.commit_ms,
            }
        )

    def block(self, tx: Transaction, collection: str, lsn: int) -> dict[str, Any] | None:
        """One more event of ``tx`` in ``collection``: its ``transaction`` block (``None`` without the metadata)."""
        if not tx.begun:
            self.begin(tx)
        tx.total += 1
        if not self.enabled:
            # counted per collection only for the END record: without it, a transaction of a million logical
            # messages (each a collection of its own) would hold a million counters for nothing
            return None
        order = tx.per_collection[collection] = tx.per_collection.get(collection, 0) + 1
        return {"id": f"{tx.xid}:{lsn}", "total_order": tx.total, "data_collection_order": order}
