"""Decoder of PostgreSQL's ``pgoutput`` logical replication protocol, version 1, plus logical messages.

Each row that ``pg_logical_slot_peek_binary_changes`` returns carries one protocol message. This module
turns those bytes into small immutable objects and keeps the relation cache that later messages refer to:
PostgreSQL sends a ``Relation`` message before the first change of a table in a session and again after
any change to its definition, so columns added or dropped mid-stream appear in the events that follow.

The protocol is documented in PostgreSQL's "Logical Replication Message Formats" chapter.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from walflow.errors import DecodeError
from walflow.source.lsn import Lsn

#: PostgreSQL timestamps count microseconds from 2000-01-01 00:00:00 UTC.
PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
PG_EPOCH_MICROS_FROM_UNIX = 946_684_800_000_000

_U8 = struct.Struct("!B")
_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")
_I64 = struct.Struct("!q")
_U64 = struct.Struct("!Q")
_BEGIN = struct.Struct("!QqI")
_COMMIT = struct.Struct("!BQQq")
_COLUMN_TAIL = struct.Struct("!Ii")

#: Marker for a TOASTed value that did not change and therefore was not sent ('u' in TupleData).
UNCHANGED_TOAST = object()


def lsn_to_str(lsn: int) -> str:
    """Format an LSN the way PostgreSQL prints it (``16/B374D848``): :class:`~walflow.source.lsn.Lsn`'s text."""
    return str(Lsn(lsn))


def str_to_lsn(text: str) -> int:
    """Parse PostgreSQL's ``XXX/XXX`` LSN notation (:meth:`walflow.source.lsn.Lsn.parse`)."""
    return Lsn.parse(text)


def pg_micros_to_unix_ms(micros: int) -> int:
    return (micros + PG_EPOCH_MICROS_FROM_UNIX) // 1000


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(frozen=True, slots=True)
class Relation:
    relation_id: int
    namespace: str
    name: str
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int
    commit_ts: int  # microseconds since the PostgreSQL epoch
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True, slots=True)
class Origin:
    lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class TypeInfo:
    type_oid: int
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Insert:
    relation: Relation
    new: list[Any]


@dataclass(frozen=True, slots=True)
class Update:
    relation: Relation
    old: list[Any] | None
    old_is_key: bool
    new: list[Any]


@dataclass(frozen=True, slots=True)
class Delete:
    relation: Relation
    old: list[Any]
    old_is_key: bool


@dataclass(frozen=True, slots=True)
class Truncate:
    relations: tuple[Relation, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True, slots=True)
class Message:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


#: what :meth:`PgOutputDecoder.decode` returns
PgOutputMessage = Begin | Commit | Origin | TypeInfo | Insert | Update | Delete | Truncate | Message | Relation


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(b"\0", pos)
    return data[pos:end].decode("utf-8"), end + 1


class PgOutputDecoder:
    """Stateful decoder: one per slot session, because Relation messages are cached across transactions.

    :meth:`decode` returns one of the message dataclasses above. Tuple values stay as the text form
    PostgreSQL sends (``str``), ``None`` for SQL NULL, or :data:`UNCHANGED_TOAST`.
    """

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}
        self.types: dict[int, TypeInfo] = {}

    def decode(self, data: bytes) -> PgOutputMessage:
        try:
            kind = data[0]
            if kind == 0x49:  # 'I'
                return self._insert(data)
            if kind == 0x55:  # 'U'
                return self._update(data)
            if kind == 0x44:  # 'D'
                return self._delete(data)
            if kind == 0x42:  # 'B'
                return Begin(*_BEGIN.unpack_from(data, 1))
            if kind == 0x43:  # 'C'
                return Commit(*_COMMIT.unpack_from(data, 1))
            if kind == 0x52:  # 'R'
                return self._relation(data)
            if kind == 0x54:  # 'T'
                return self._truncate(data)
            if kind == 0x4D:  # 'M'
                return self._message(data)
            if kind == 0x59:  # 'Y'
                return self._type(data)
            if kind == 0x4F:  # 'O'
                (lsn,) = _U64.unpack_from(data, 1)
                name, _ = _cstring(data, 9)
                return Origin(lsn, name)
        except DecodeError:
            raise
        except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
            raise DecodeError(
                f"malformed pgoutput message {data[:1]!r} of {len(data)} bytes: {exc}; "
                "is the slot really using the pgoutput plugin with proto_version 1?"
            ) from exc
        raise DecodeError(
            f"unknown pgoutput message type {data[:1]!r}; walflow reads protocol version 1 "
            "(streamed in-progress transactions and two-phase commits are not requested)"
        )

    # -- messages ---------------------------------------------------------------------------------
    def _relation(self, data: bytes) -> Relation:
        (relid,) = _U32.unpack_from(data, 1)
        namespace, pos = _cstring(data, 5)
        name, pos = _cstring(data, pos)
        replident = chr(data[pos])
        (ncols,) = _I16.unpack_from(data, pos + 1)
        pos += 3
        columns = []
        for _ in range(ncols):
            flags = data[pos]
            colname, pos = _cstring(data, pos + 1)
            type_oid, typmod = _COLUMN_TAIL.unpack_from(data, pos)
            pos += 8
            columns.append(Column(colname, type_oid, typmod, bool(flags & 1)))
        relation = Relation(relid, namespace or "pg_catalog", name, replident, tuple(columns))
        self.relations[relid] = relation
        return relation

    def _type(self, data: bytes) -> TypeInfo:
        (oid,) = _U32.unpack_from(data, 1)
        namespace, pos = _cstring(data, 5)
        name, _ = _cstring(data, pos)
        info = TypeInfo(oid, namespace, name)
        self.types[oid] = info
        return info

    def _rel(self, relid: int) -> Relation:
        try:
            return self.relations[relid]
        except KeyError:
            raise DecodeError(
                f"change for relation OID {relid} arrived before its Relation message; "
                "the slot stream was read from the middle of a session"
            ) from None

    def _insert(self, data: bytes) -> Insert:
        (relid,) = _U32.unpack_from(data, 1)
        # data[5] is 'N'
        values, _ = _tuple(data, 6)
        return Insert(self._rel(relid), values)

    def _update(self, data: bytes) -> Update:
        (relid,) = _U32.unpack_from(data, 1)
        marker = data[5]
        old = None
        old_is_key = False
        pos = 6
        if marker in (0x4B, 0x4F):  # 'K' or 'O'
            old_is_key = marker == 0x4B
            old, pos = _tuple(data, 6)
            pos += 1  # the 'N' marker
        new, _ = _tuple(data, pos)
        return Update(self._rel(relid), old, old_is_key, new)

    def _delete(self, data: bytes) -> Delete:
        (relid,) = _U32.unpack_from(data, 1)
        marker = data[5]
        old, _ = _tuple(data, 6)
        return Delete(self._rel(relid), old, marker == 0x4B)

    def _truncate(self, data: bytes) -> Truncate:
        (nrels,) = _I32.unpack_from(data, 1)
        options = data[5]
        relids = struct.unpack_from(f"!{nrels}I", data, 6)
        return Truncate(tuple(self._rel(r) for r in relids), bool(options & 1), bool(options & 2))

    def _message(self, data: bytes) -> Message:
        flags = data[1]
        (lsn,) = _U64.unpack_from(data, 2)
        prefix, pos = _cstring(data, 10)
        (length,) = _I32.unpack_from(data, pos)
        pos += 4
        return Message(bool(flags & 1), lsn, prefix, bytes(data[pos : pos + length]))


def _tuple(data: bytes, pos: int) -> tuple[list[Any], int]:
    """Decode a TupleData structure starting at ``pos``; return values and the position after it."""
    ncols = (data[pos] << 8) | data[pos + 1]
    pos += 2
    values: list[Any] = [None] * ncols
    unpack = _I32.unpack_from
    for i in range(ncols):
        kind = data[pos]
        if kind == 0x74:  # 't' text
            start = pos + 5
            pos = start + unpack(data, pos + 1)[0]
            values[i] = data[start:pos].decode("utf-8")
        elif kind == 0x6E:  # 'n' null (already None)
            pos += 1
        elif kind == 0x75:  # 'u' unchanged TOAST
            values[i] = UNCHANGED_TOAST
            pos += 1
        else:
            raise DecodeError(f"unknown TupleData column kind {chr(kind)!r}; binary values are not requested")
    return values, pos


def commit_time_ms(commit_ts: int) -> int:
    """Commit timestamp of a Begin/Commit message as Unix epoch milliseconds."""
    return pg_micros_to_unix_ms(commit_ts)


def commit_datetime(commit_ts: int) -> datetime:
    return PG_EPOCH + timedelta(microseconds=commit_ts)
