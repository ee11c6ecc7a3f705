"""The slot read by a stream round: ``pg_logical_slot_peek_binary_changes`` through a server-side cursor, in blocks.

Peeking consumes nothing: the slot moves only when the batch advances it, after Kafka acknowledged what it read. The
cursor hands the rows over ``FETCH_ROWS`` at a time, fetched ahead of the decoding by
:class:`~walflow.capture.prefetch.BlockPrefetch`, so memory stays bounded whatever the size of a transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import psycopg

from walflow.capture.batches import BatchSummary
from walflow.capture.prefetch import BlockPrefetch
from walflow.capture.stream.dispatch import Dispatcher
from walflow.config.connector import ConnectorConfig
from walflow.errors import ConversionError, DriftError, RecordTooLargeError
from walflow.source.connection import MESSAGES_SERVER_VERSION
from walflow.source.lsn import Lsn
from walflow.source.pgoutput import PgOutputDecoder

log = logging.getLogger("walflow.capture.stream")

#: How many rows the server-side cursor hands over per round trip.
FETCH_ROWS = 2000


class SlotPeek:
    """The blocks of (LSN, pgoutput bytes) rows of one peek, from the slot's position up to ``upto``.

    :param upto_nchanges: bounds the server's work too (PostgreSQL stops only at a transaction boundary).
    """

    def __init__(
        self,
        conn: psycopg.Connection,
        slot_name: str,
        publication_name: str,
        upto: str,
        upto_nchanges: int,
        server_version: int,
    ) -> None:
        options = ["proto_version", "1", "publication_names", quote_publication(publication_name)]
        if server_version >= MESSAGES_SERVER_VERSION:
            options += ["messages", "true"]
        self._query = (
            "SELECT (lsn - '0/0')::int8, data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, %s, "
            + ", ".join(["%s"] * len(options))
            + ")"
        )
        self._params = (slot_name, upto, upto_nchanges, *options)
        self._conn = conn
        self._cursor: psycopg.Cursor[Any] | None = None
        self._blocks: BlockPrefetch | None = None
        #: rows read so far: as many as upto_nchanges means PostgreSQL stopped before ``upto``
        self.returned = 0

    def __enter__(self) -> SlotPeek:
        cursor = self._conn.cursor(name="walflow_peek", binary=True)
        cursor.itersize = FETCH_ROWS
        try:
            cursor.execute(self._query, self._params)
            self._blocks = BlockPrefetch(cursor, FETCH_ROWS)
        except BaseException:
            cursor.close()
            raise
        self._cursor = cursor
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            if self._blocks is not None:
                self._blocks.close()
        finally:
            if self._cursor is not None:
                self._cursor.close()

    def __iter__(self) -> Iterator[list[tuple[int, bytes]]]:
        assert self._blocks is not None, "SlotPeek is read inside its with-block"
        while rows := self._blocks.next():
            self.returned += len(rows)
            yield rows


def read_round(
    conn: psycopg.Connection,
    config: ConnectorConfig,
    upto_text: str,
    server_version: int,
    summary: BatchSummary,
    dispatcher: Dispatcher,
    *,
    open_chunks: int,
    after_block: Callable[[int], None],
) -> tuple[int | None, RecordTooLargeError | DriftError | ConversionError | None]:
    """One round's read of the slot up to ``upto_text``, each message decoded and dispatched.

    Returns where the slot may advance to (``None``: nowhere yet) and the error that stopped the round at one change
    (everything before that change's transaction is confirmed once acknowledged; the batch then fails with the fix).
    ``after_block`` is called with the last LSN of each block read through (the task log's progress).
    """
    decode = PgOutputDecoder().decode
    dispatch = dispatcher.dispatch
    # upto_nchanges bounds the server-side work too (PostgreSQL stops only at a transaction boundary). It counts
    # protocol messages, Begin/Commit/Relation included, hence the headroom over max_events (and a constant part
    # for the few transactions of bookkeeping a batch writes, which the next one decodes too).
    upto_nchanges = config.walflow_batch_max_events * 3 + 64 + 8 * open_chunks
    peek = SlotPeek(conn, config.slot_name, config.publication_name, upto_text, upto_nchanges, server_version)
    complete = True
    stop_error: RecordTooLargeError | DriftError | ConversionError | None = None
    conn.autocommit = False
    try:
        with peek:
            for rows in peek:
                for lsn_value, data in rows:
                    if dispatch(lsn_value, decode(data)):
                        complete = False
                        break
                else:
                    after_block(rows[-1][0])
                    continue
                break
    except (RecordTooLargeError, DriftError, ConversionError) as exc:
        stop_error = exc
        complete = False
        if isinstance(exc, RecordTooLargeError):
            summary.stopped_by = "record too large"
        else:
            summary.stopped_by = "value not convertible" if isinstance(exc, ConversionError) else "drift"
    finally:
        if not conn.closed:
            conn.rollback()
            conn.autocommit = True
    summary.events_per_topic = dict(dispatcher.per_topic)
    if dispatcher.skipped:
        log.warning(
            "connector %s: skipped %d transaction(s) an earlier batch produced", config.name, dispatcher.skipped
        )
    if complete and peek.returned >= upto_nchanges:
        # PostgreSQL stopped at upto_nchanges, before upto: only what was read may be confirmed.
        complete = False
        summary.stopped_by = "upto_nchanges"
    if complete:
        # Everything committed before upto was read: the slot may move there even if nothing was captured.
        return dispatcher.end_of_round(Lsn.parse(upto_text)), None
    return dispatcher.last_commit_end, stop_error


def quote_publication(name: str) -> str:
    """``name`` as pgoutput's ``publication_names`` option reads it (an identifier list): quoted where it must be."""
    if name.isidentifier() and name == name.lower():
        return name
    return '"' + name.replace('"', '""') + '"'
