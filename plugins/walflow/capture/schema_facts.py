"""Schema facts: what a captured table's columns were, and what its existing rows hold in a new column, at the
position where its definition changed.

Debezium's change events name their columns as they were when each change was made (pgoutput's Relation message
is decoded with the catalog of its own time), but they cannot say what happened between two definitions: that
``title`` is ``name`` renamed (the same attribute), that ``a`` was dropped and added again (another attribute with
the old name), or what the rows that existed before an ``ADD COLUMN`` hold in it. PostgreSQL fills those rows
without a change event: with the default as it was at the ``ADD COLUMN`` (kept in ``pg_attribute.attmissingval``),
not the default the column has by the time anyone reads the catalog (a later ``SET DEFAULT`` or ``DROP DEFAULT``
changes only rows inserted afterwards), or, for a volatile default, with one value per row.

So whenever a table's Relation message shows another definition than the one before it (names, types, replica
identity, key), the stream writes one *fact* to the connector's schema topic (``walflow.schema.topic``, by default
``__walflow-schema.<topic.prefix>``; walflow's own, beside Debezium's topics, which stay exactly Debezium's): the
position, every field with its attribute number, and for each the value that rows older than the column hold
(``fill``), or that walflow cannot know it (``known: false``: a default evaluated per row, or a table rewritten
since). A column with a default but no ``attmissingval`` was either filled per row (a volatile default, which
rewrites the table), lost its kept value to a rewrite, or was added without a default and given one later (its
older rows are NULL). Only the last leaves the table's storage as it was: each fact carries the table's *storage*,
its ``relfilenode`` and the highest attribute number when walflow first saw that relfilenode, and a column numbered
above it on a table with the same relfilenode was added after that read with no rewrite since, so its older rows
are known to be NULL. Each fact also names its relation (the table's OID): a table dropped and created again under
its name, or another one swapped in, numbers its attributes anew, so an attribute number means something only among
the facts of one relation.

The lake job reads these facts to rename its columns, fill new ones with the truth and map old events onto
renamed columns (:mod:`walflow.lake.evolution`). A fact is produced like any record, before the slot moves past
its change; the definition it describes is remembered in the state table once Kafka acknowledged it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from walflow.records.arrays import parse_array
from walflow.records.events import match_columns, now_ms
from walflow.records.facts import FORMAT, START_KIND, field_type
from walflow.source.lsn import Lsn

if TYPE_CHECKING:
    from walflow.kafka import EventProducer
    from walflow.records.events import TableSchema
    from walflow.source.catalog import CatalogColumn, CatalogTable
    from walflow.source.pgoutput import Relation
    from walflow.source.state import StateStore

log = logging.getLogger(__name__)

#: state-table key prefix of the definition each table's last fact described (by relation OID)
STATE_PREFIX = "schema:"


@dataclass(frozen=True)
class Fact:
    """One table's definition from a position on (see the module's docstring)."""

    schema: str
    table: str
    lsn: int
    #: (field name, attribute number or None, fill as the event would carry it, whether the fill is known)
    fields: tuple[tuple[str, int | None, Any, bool], ...]
    key: tuple[str, ...]
    identity: str
    #: the fields the replica identity writes into old tuples (under REPLICA IDENTITY USING INDEX: the index's)
    identity_fields: tuple[str, ...]
    #: each field's type as its events' schema gives it (:func:`walflow.records.facts.field_type`)
    types: tuple[str, ...] = ()
    #: (``relfilenode``, the highest attribute number when walflow first saw it), or None when unknown
    storage: tuple[int, int] | None = None
    #: the relation's OID: attribute numbers are those of one relation, and a table dropped and created again under
    #: its name (or another one swapped in) numbers its attributes anew
    relation: int | None = None

    def signature(self) -> list[Any]:
        """What tells one definition from another (the fills are not part of it: they are facts about rows)."""
        return [
            [[name, attnum] for name, attnum, _f, _k in self.fields],
            list(self.key),
            self.identity,
            list(self.identity_fields),
            list(self.types),
        ]

    def record(self) -> tuple[bytes, bytes]:
        key = orjson.dumps({"schema": self.schema, "table": self.table})
        value = {
            "format": FORMAT,
            "schema": self.schema,
            "table": self.table,
            "lsn": self.lsn,
            "fields": [
                {"field": n, "attnum": a, "fill": f, "known": k, "type": ty}
                for (n, a, f, k), ty in zip(self.fields, self.types)
            ],
            "key": list(self.key),
            "identity": self.identity,
            "identity_fields": list(self.identity_fields),
            "storage": list(self.storage) if self.storage else None,
            "relation": self.relation,
            "mode": "catalog",
            "at_ms": now_ms(),
        }
        return key, orjson.dumps(value, default=str)


def missing_value(text: str | None) -> tuple[bool, str | None]:
    """The value of ``pg_attribute.attmissingval`` (a one-element array in text form): (whether there is one, its
    element's text, None for SQL NULL)."""
    if text is None:
        return False, None
    items = parse_array(text)
    return True, (items[0] if items else None)


def _field(spec: Any, info: CatalogColumn | None, unrewritten: bool = False) -> tuple[str, int | None, Any, bool]:
    """One field of a fact: its name, the attribute it is, and what rows older than the attribute hold in it.

    :param unrewritten: the attribute was added after a catalog read and the table kept that read's storage since.
    """
    if info is None:
        return spec.name, None, None, False
    has, text = missing_value(info.missing)
    if has:
        try:
            return spec.name, info.attnum, None if text is None else spec.converter.convert(text), True
        except (ValueError, ArithmeticError):
            return spec.name, info.attnum, None, False
    # a default, but no value kept for older rows: evaluated per row (a volatile default rewrites the table), the
    # table was rewritten since (which drops the kept value), or the default was set after a plain ADD COLUMN.
    # Only the last leaves the storage as it was, and then the older rows hold NULL.
    return spec.name, info.attnum, None, (info.default_expr is None and not info.implicit_default) or unrewritten


def storage(table: CatalogTable | None, previous: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """The storage to record for ``table`` as read now: ``previous`` (the earliest read of the same relfilenode,
    whose attribute ceiling is the lowest) while the relfilenode is unchanged, else this read's."""
    if table is None or table.filenode is None:
        return None
    if previous is not None and previous[0] == table.filenode:
        return previous
    return table.filenode, table.last_attnum


def build_fact(
    schema: TableSchema,
    relation: Relation,
    table: CatalogTable | None,
    lsn: int,
    previous: dict[str, int] | None = None,
    previous_storage: tuple[int, int] | None = None,
) -> Fact:
    """The fact of ``schema`` (built from ``relation`` at ``lsn``), with attribute numbers and fills from the catalog.

    The catalog is read now; the Relation message may be older. A column matched by name to an attribute that
    cannot have existed when the message was written is another attribute of that name, since dropped (``a``
    dropped and added again): every live attribute numbered below the match existed before it, so the message
    would list them all before the column; and an attribute of another type than the message's column, when the
    previous fact gave the name another attribute, is the new one. Such a column takes the attribute the previous
    fact gave its field (``previous``: field name -> attribute number), or none.

    ``previous_storage`` is the previous fact's (:attr:`Fact.storage`): an attribute numbered above its ceiling,
    with a default but no kept value, on a table that still has its relfilenode, was added without a default after
    that read and never rewritten (older rows NULL).
    """
    matched = match_columns(relation, table) if table is not None else [None] * len(relation.columns)
    if table is not None:
        live = sorted(attnum for attnum, name in table.attributes if name is not None)
        for i, (column, info) in enumerate(zip(relation.columns, matched)):
            if info is None:
                continue
            if sum(1 for a in live if a < info.attnum) > i:
                matched[i] = None
            elif (
                info.attr_type_oid != column.type_oid
                and previous
                and column.name in previous
                and previous[column.name] != info.attnum
            ):
                # another type than the attribute of that name has now, and another attribute before: the old one
                matched[i] = None
    fields: list[tuple[str, int | None, Any, bool]] = []
    kept = storage(table, previous_storage)
    ceiling = kept[1] if kept is not None and kept == previous_storage else None
    for spec in schema.fields:
        info = matched[spec.index]
        if info is None and previous and spec.name in previous:
            fields.append(
                (spec.name, previous[spec.name], None, True)
            )  # an attribute dropped since: its fill is history
        else:
            fields.append(_field(spec, info, ceiling is not None and info is not None and info.attnum > ceiling))
    flagged = [c.name for c in relation.columns if c.is_key]
    types = tuple(field_type(spec.converter.schema) for spec in schema.fields)
    return Fact(
        schema.schema,
        schema.table,
        lsn,
        tuple(fields),
        tuple(f.name for f in schema.key_fields),
        relation.replica_identity,
        tuple(flagged),
        types,
        kept,
        relation.relation_id,
    )


def catalog_fact(schema: TableSchema, table: CatalogTable, lsn: int) -> Fact:
    """The fact of a snapshot's ``schema`` (built from the catalog ``table``), at the snapshot's position ``lsn``."""
    columns = list(table.columns.values())
    fields = tuple(_field(spec, columns[spec.index]) for spec in schema.fields)
    identity = table.replica_identity
    flagged = (
        [c.name for c in columns if not c.generated]
        if identity == "f"
        else list(table.primary_key)
        if identity == "d"
        else []
    )
    types = tuple(field_type(spec.converter.schema) for spec in schema.fields)
    return Fact(
        schema.schema,
        schema.table,
        lsn,
        fields,
        tuple(f.name for f in schema.key_fields),
        identity,
        tuple(flagged),
        types,
        storage(table),
        table.oid,
    )


def start_record(connector: str, offsets: dict[str, dict[int, int]], lsn: int) -> tuple[bytes, bytes]:
    """The record of a *start fact*: the end offsets of the table topics just before an initial snapshot wrote its
    rows (at consistent point ``lsn``). A lake table that has applied nothing yet (a new one, or one dropped by
    ``walflow reset --lake``) starts there rather than at offset 0: the snapshot holds every row as it was, and
    what the topics held before it (a row deleted since, whose delete was never streamed before a reset) must not
    come back."""
    doc = {
        "format": FORMAT,
        "kind": START_KIND,
        "connector": connector,
        "lsn": lsn,
        "at": int(time.time() * 1000),
        "offsets": {t: {str(p): o for p, o in parts.items()} for t, parts in offsets.items()},
    }
    return f"{START_KIND}:{connector}".encode(), orjson.dumps(doc)


class SchemaFacts:
    """Writes a fact whenever a captured table's definition differs from the last one described (per batch: the
    facts produced, and the definitions remembered once the batch's records were acknowledged)."""

    def __init__(self, store: StateStore, producer: EventProducer, topic: str) -> None:
        self.store = store
        self.producer = producer
        self.topic = topic
        self._known: dict[int, Any] = {}
        self._loaded: dict[int, Any] | None = None
        self._pending: dict[int, Any] = {}
        self.produced: list[Fact] = []
        self._topic_ready = False

    def _last(self, oid: int) -> Any:
        """The last definition described for relation ``oid`` (all of the connector's are read at first use, in
        one query: a batch may meet thousands of tables)."""
        if self._loaded is None:
            self._loaded = {
                int(k[len(STATE_PREFIX) :]): v
                for k, v in self.store.prefixed(STATE_PREFIX).items()
                if k[len(STATE_PREFIX) :].isdigit()
            }
        return self._pending.get(oid, self._known.get(oid, self._loaded.get(oid)))

    def previous(self, oid: int) -> dict[str, int]:
        """Field name -> attribute number of the last definition described for relation ``oid``."""
        last = self._last(oid)
        return {n: a for n, a in last["signature"][0] if a is not None} if last else {}

    def previous_storage(self, oid: int) -> tuple[int, int] | None:
        """The storage the last definition described for relation ``oid`` recorded (:attr:`Fact.storage`; None:
        unknown, as for definitions remembered by an older walflow)."""
        last = self._last(oid)
        value = last.get("storage") if last else None
        return (int(value[0]), int(value[1])) if value else None

    def observe(self, oid: int, fact: Fact) -> tuple[Fact | None, Fact | None]:
        """Produce ``fact`` when it describes another definition than the last one of relation ``oid``.

        :returns: (the fact produced or None, the previous definition's fields as a fact or None when none is known).
        """
        previous = self._last(oid)
        signature = fact.signature()
        if previous is not None and previous.get("signature") == signature:
            return None, None
        if not self._topic_ready:
            self.producer.ensure_topic(self.topic)
            self._topic_ready = True
        key, value = fact.record()
        self.producer.send(self.topic, key, value)
        self._pending[oid] = {
            "signature": signature,
            "lsn": fact.lsn,
            "storage": list(fact.storage) if fact.storage else None,
        }
        self.produced.append(fact)
        log.info(
            "table %s.%s: definition changed at %s (%s); fact written to %s",
            fact.schema,
            fact.table,
            Lsn(fact.lsn),
            ", ".join(f"{n}#{a}" for n, a, _f, _k in fact.fields),
            self.topic,
        )
        before = None
        if previous is not None:
            before = Fact(
                fact.schema,
                fact.table,
                int(previous.get("lsn") or 0),
                tuple((n, a, None, True) for n, a in previous["signature"][0]),
                (),
                "",
                (),
            )
        return fact, before

    def save(self) -> None:
        """Remember the definitions of the facts produced (call once Kafka acknowledged them)."""
        if self._pending and not self.store.exists():
            return  # a connector without state (streamed without its setup): the facts are written again next time
        for oid, value in self._pending.items():
            self.store.put(STATE_PREFIX + str(oid), value)
            self._known[oid] = value
        self._pending.clear()
