"""What an incremental snapshot keeps between and within batches: the running signal's progress (saved in the
state table), the signals queued behind it, and each chunk selected and waiting for its window to close.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from sys import getsizeof
from typing import Any, NamedTuple

import orjson

from walflow.capture.snapshot_tables import SnapshotTable


@dataclass
class Chunk:
    """One selected chunk waiting for its high watermark."""

    id: str
    table: SnapshotTable
    rows: list[Sequence[Any]]  # the chunk's rows (text values), in the order they were read
    dedupe: list[Any]  # FieldSpecs whose values identify a row (the event key, or the surrogate key)
    #: the selection cursor before this chunk: (table, last_key, max_key, null_phase, last_ctid)
    cursor_before: tuple[str, list[str] | None, list[str] | None, bool, str | None]
    in_window: bool = False
    #: the identities (:func:`row_key`) of rows a streamed change inside the window made stale
    stale: set[bytes] = field(default_factory=set)
    #: no two rows can share an identity (it is the primary key): without stale rows, all rows are emitted as read
    unique: bool = False
    #: the rows' physical positions, for rows without a key value (no streamed change can name them)
    ctids: list[str] | None = None
    #: the transactions the SELECT's snapshot did not see as committed, as (32-bit ids in progress, the first id
    #: not yet completed): one of them can commit between the snapshot and the low watermark, or have written its
    #: commit before the low watermark and still be invisible to the SELECT (its commit waits for the WAL flush or a
    #: synchronous standby before it shows), so its changes make rows stale even though they are streamed before the
    #: window opens
    unseen: tuple[frozenset[int], int] | None = None
    #: read-only windows (no watermark): the WAL position at which the rows are emitted, the first commit at or after
    #: the end of the WAL when the SELECT's snapshot was taken (:attr:`ChunkRead.wal_end`)
    close_at: int | None = None
    #: the identities of the chunk's rows, computed when a streamed change first concerns its table
    _identities: frozenset[bytes] | None = field(default=None, repr=False)

    def identities(self) -> frozenset[bytes]:
        """The identities (:func:`row_key`) of the chunk's rows: a streamed change is recorded as making a row stale
        only when it names one of them, so :attr:`stale` holds at most a chunk's rows however many rows a
        transaction committed inside the window changes."""
        if self._identities is None:
            self._identities = frozenset(row_key(row, self.dedupe) for row in self.rows)
        return self._identities

    @property
    def watched(self) -> bool:
        """Whether a streamed change of the chunk's table can make one of its rows stale now."""
        return self.in_window or self.unseen is not None

    def stale_by(self, xid: int | None) -> bool:
        """Whether a change of transaction ``xid`` streamed now makes the chunk's rows with its keys stale."""
        if self.in_window:
            return True
        if self.unseen is None or xid is None:
            return False
        in_progress, xmax = self.unseen
        # xid >= xmax in PostgreSQL's circular order of 32-bit ids
        return xid in in_progress or ((xid - xmax) & 0xFFFFFFFF) < 0x80000000

    def current(self) -> tuple[list[Sequence[Any]], int]:
        """The rows to emit when the window closes, and how many were dropped as stale.

        Identities are computed only when they can matter (a change inside the window, or a key that is not the
        primary key, where rows of one identity collapse to the last one as Debezium's buffer does): for most
        chunks no change touched the table in between, and the rows go out as they were read.
        """
        if self.ctids is not None:
            latest = dict(zip(self.ctids, self.rows))
            return list(latest.values()), 0
        if self.unique and not self.stale:
            return self.rows, 0
        by_identity = {row_key(row, self.dedupe): row for row in self.rows}
        dropped = sum(1 for key in self.stale if by_identity.pop(key, None) is not None)
        return list(by_identity.values()), dropped


def rows_size(rows: Sequence[Sequence[Any]]) -> int:
    """About how many bytes ``rows`` (text values) take in memory, from 32 rows spread over them: a round's
    selection is bounded by it, as wide rows would make a round of many rows large. (Measuring every value would
    cost about a twentieth of a whole incremental snapshot's time; a sample a few microseconds a chunk.)"""
    if not rows:
        return 0
    sample = rows[:: max(1, len(rows) // 32)]
    return len(rows) * sum(getsizeof(row) + sum(getsizeof(v) for v in row) for row in sample) // len(sample)


class ChunkRead(NamedTuple):
    """What :meth:`ChunkReader.read_chunk` read: the rows (text values), whether the table is done, the rows' ctids
    in the NULL-key phase (else ``None``), and the transactions the SELECT's snapshot did not see."""

    rows: list[Sequence[Any]]
    table_done: bool
    ctids: list[str] | None
    unseen: tuple[frozenset[int], int]
    #: read-only windows: the end of the WAL when the SELECT's snapshot was taken (every transaction it sees
    #: committed before it), where the chunk's rows take their place in the stream
    wal_end: int | None = None


@dataclass
class SnapshotProgress:
    """The persisted state of the running incremental snapshot, and the signals queued behind it."""

    signal_id: str
    tables: list[str]  # still to do, the current one first
    condition: dict[str, str] = field(default_factory=dict)  # data collection -> additional condition
    surrogate_key: str | None = None
    last_key: list[str] | None = None
    max_key: list[str] | None = None
    null_phase: bool = False  # reading rows whose surrogate key is NULL, by ctid
    last_ctid: str | None = None
    paused: bool = False
    rows: int = 0
    chunks: int = 0
    rows_per_table: dict[str, int] = field(default_factory=dict)
    #: later execute-snapshot signals, in arrival order
    queued: list[QueuedSignal] = field(default_factory=list)
    #: set when the signal was stopped or failed: its outcome is recorded, it must not be resumed or completed
    ended: bool = False
    #: the stop-snapshot signal that dropped some of its tables: it ends "stopped", not "completed"
    stopped_by: str | None = None

    def __post_init__(self) -> None:
        # read back from the state table as JSON objects
        self.queued = [q if isinstance(q, QueuedSignal) else QueuedSignal.from_state(q) for q in self.queued]

    def as_dict(self) -> dict[str, Any]:
        """The progress as the state table holds it (JSON)."""
        return {**self.__dict__, "queued": [asdict(q) for q in self.queued]}


@dataclass
class QueuedSignal:
    """An execute-snapshot signal queued behind the running one: its own snapshot, with its own tables, conditions
    and surrogate key."""

    signal_id: str
    tables: list[str]
    #: data collection -> additional condition
    condition: dict[str, str] = field(default_factory=dict)
    surrogate_key: str | None = None
    #: the stop-snapshot signal that dropped some of its tables while it was queued (it ends "stopped")
    stopped_by: str | None = None

    @classmethod
    def from_state(cls, entry: dict[str, Any]) -> QueuedSignal:
        """A queued signal as the state table holds it (keys a version of walflow did not write are optional)."""
        return cls(
            signal_id=entry["signal_id"],
            tables=list(entry["tables"]),
            condition=dict(entry.get("condition") or {}),
            surrogate_key=entry.get("surrogate_key"),
            stopped_by=entry.get("stopped_by"),
        )


def dedupe_fields(table: SnapshotTable, surrogate: str | None) -> list[Any]:
    """The fields that tell a chunk's rows apart: the surrogate key when the signal names one, else the event key."""
    if surrogate:
        return [f for f in table.schema.fields if f.index == table.schema.column_names.index(surrogate)]
    return list(table.schema.key_fields)


def row_key(row: Sequence[Any], fields: list[Any]) -> bytes:
    """The identity of a snapshot row, in the converted form streamed events are compared in."""
    return orjson.dumps([None if row[f.index] is None else f.converter.convert(row[f.index]) for f in fields])
