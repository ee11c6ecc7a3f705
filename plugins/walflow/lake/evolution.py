"""A lake table following its source table's definition through renames, re-added columns and new columns,
from the connector's schema facts (:mod:`walflow.capture.schema_facts`, read from the schema topic).

Change events name columns; the facts say which attribute each name was at each position. With them the lake
renames a column whose attribute was renamed (instead of adding an empty one beside a stale one), maps the fields
of events written before a rename onto the renamed column, fills a new column's existing rows with what PostgreSQL
gave them (``attmissingval``: the default at the time of the ``ADD COLUMN``, not the one the column has by the
time the lake runs), and refills a column whose name now belongs to another attribute (dropped and added again).
Where the facts say the rows' values cannot be known (a per-row default), a keyed table is re-read by the stream
(an incremental snapshot) and a keyless one stops with the fix. Without facts (a connector whose lake was off
when it streamed, or records of an older walflow) the lake maps by name, as before.

Plain Python: the executors use :class:`Mapping` (pickled with the decode plan).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import orjson

from walflow.errors import LakeSchemaError
from walflow.records.facts import field_type

#: table property: the source attribute number of each lake column, ``{column: attnum}``
ATTNUMS_PROPERTY = "walflow.attnums"
#: table property: the source relation (OID) whose attribute numbers :data:`ATTNUMS_PROPERTY` holds
RELATION_PROPERTY = "walflow.attnums.relation"


@dataclass(frozen=True)
class Mapping:
    """What the decoder needs to map a record's fields onto the target's columns by attribute: the attribute of
    each target column, and for each field list a fact describes, its fields' attributes."""

    target: dict[str, int] = field(default_factory=dict)
    #: (fields as (name, type), their attribute numbers) of each fact, newest last
    shapes: tuple[tuple[tuple[tuple[str, str], ...], tuple[int | None, ...]], ...] = ()

    def order(self, fields: list[dict[str, Any]], target_names: list[str]) -> list[int] | None:
        """Where each target column sits among ``fields`` (a record schema's ``after`` fields; -1: absent), by
        attribute when a fact describes exactly these fields (names and types), else None (map by name)."""
        if not self.target:
            return None
        names = [f["field"] for f in fields]
        key = tuple((f["field"], field_type(f)) for f in fields)
        attnums = None
        for shape, numbers in reversed(self.shapes):
            if shape == key:
                attnums = numbers
                break
        if attnums is None:
            return None
        at = {a: i for i, a in enumerate(attnums) if a is not None}
        by_name = {n: i for i, n in enumerate(names)}
        out = []
        for name in target_names:
            attnum = self.target.get(name)
            out.append(at.get(attnum, -1) if attnum is not None else by_name.get(name, -1))
        return out


class TableFacts:
    """The schema facts of one source table, oldest first."""

    def __init__(self, facts: list[dict[str, Any]]) -> None:
        self.facts = sorted(facts, key=lambda f: int(f.get("lsn") or 0))

    def __bool__(self) -> bool:
        return bool(self.facts)

    def at(self, lsn: int) -> dict[str, Any] | None:
        """The fact in force at ``lsn`` (the newest not after it), or None."""
        found = None
        for fact in self.facts:
            if int(fact.get("lsn") or 0) <= lsn:
                found = fact
        return found

    def of_relation(self, target: dict[str, Any]) -> TableFacts:
        """The facts of ``target``'s relation. Attribute numbers mean something only within one relation: a table
        dropped and created again under its name, or another one swapped in, numbers its attributes anew, and a
        former table's attribute must not give a new column its fill or its place. Facts that do not name their
        relation (written by an older walflow) are kept, as before."""
        relation = target.get("relation")
        if relation is None:
            return self
        return TableFacts([f for f in self.facts if f.get("relation") in (relation, None)])

    @staticmethod
    def attnums(fact: dict[str, Any]) -> dict[str, int]:
        return {f["field"]: f["attnum"] for f in fact["fields"] if f.get("attnum") is not None}

    def fills(self, target: dict[str, Any]) -> dict[str, tuple[bool, Any]]:
        """For each field of ``target`` (a fact): (known, value) that rows older than its attribute hold, from the
        first fact that has the attribute (the catalog read closest to its ``ADD COLUMN``)."""
        out: dict[str, tuple[bool, Any]] = {}
        for f in target["fields"]:
            attnum = f.get("attnum")
            first = next(
                (g for fact in self.facts for g in fact["fields"] if attnum is not None and g.get("attnum") == attnum),
                f,
            )
            out[f["field"]] = (bool(first.get("known")), first.get("fill"))
        return out

    def mapping(self, target: dict[str, Any]) -> Mapping:
        return Mapping(
            self.attnums(target),
            tuple(
                (
                    tuple((f["field"], f.get("type", "")) for f in fact["fields"]),
                    tuple(f.get("attnum") for f in fact["fields"]),
                )
                for fact in self.facts
            ),
        )

    def adopt(self, columns: list[str]) -> dict[str, int]:
        """Attribute numbers for lake ``columns`` that have none recorded: from the newest fact whose fields include
        them all (the definition the lake table was made from), else by name from the newest fact."""
        wanted = set(columns)
        for fact in reversed(self.facts):
            numbers = self.attnums(fact)
            if wanted <= set(numbers):
                return {c: numbers[c] for c in columns}
        numbers = self.attnums(self.facts[-1]) if self.facts else {}
        return {c: numbers[c] for c in columns if c in numbers}


def attnum_properties(attnums: dict[str, int], relation: int | None) -> dict[str, str]:
    """The table properties recording each lake column's source attribute number and, when known, the relation
    those numbers belong to: what :func:`read_property` reads back, written as one pair."""
    properties = {ATTNUMS_PROPERTY: orjson.dumps(attnums).decode()}
    if relation is not None:
        properties[RELATION_PROPERTY] = str(relation)
    return properties


def read_property(properties: dict[str, str], relation: int | None = None) -> dict[str, int]:
    """The source attribute number of each lake column, as the table's properties record them; none when they
    were recorded for another relation than ``relation`` (the source table was dropped and created again, or another
    one swapped in, since), whose numbers say nothing of the new one's attributes."""
    text = properties.get(ATTNUMS_PROPERTY)
    recorded_for = properties.get(RELATION_PROPERTY)
    if relation is not None and recorded_for and recorded_for != str(relation):
        return {}
    return {str(k): int(v) for k, v in orjson.loads(text).items()} if text else {}


def plan_renames(
    lake: dict[str, int], target: dict[str, int], columns: set[str]
) -> tuple[list[tuple[str, str]], list[str]]:
    """The lake columns to rename and those to refill, from the lake's attributes (``lake``: column -> attnum) and
    the target's (``target``: name -> attnum); ``columns`` are the lake table's columns.

    :returns: (old name, new name) renames; columns whose name now belongs to another attribute (dropped and added
        again: their rows take the new attribute's fill).
    """
    by_attnum = {a: n for n, a in target.items()}
    renames = []
    taken = set(columns)
    for column, attnum in sorted(lake.items(), key=lambda item: item[1]):
        new = by_attnum.get(attnum)
        if new is None or new == column or column not in taken:
            continue
        if new in taken:
            continue  # the new name is a column already (an earlier walflow added it): left as it is
        renames.append((column, new))
        taken.discard(column)
        taken.add(new)
    moved = {old for old, _new in renames}
    readded = [c for c, a in lake.items() if c not in moved and c in target and target[c] != a]
    return renames, readded


def with_fills(value_schema: dict[str, Any], fills: dict[str, tuple[bool, Any]]) -> tuple[dict[str, Any], list[str]]:
    """``value_schema`` with each ``after`` field's ``default`` replaced by the value older rows hold (the facts'
    fill), and the fields whose fill is not known (they keep the schema's default)."""
    schema = copy.deepcopy(value_schema)
    unknown = []
    for envelope_field in schema["fields"]:
        if envelope_field.get("field") not in ("before", "after"):
            continue
        for f in envelope_field.get("fields") or []:
            known, fill = fills.get(f["field"], (False, None))
            if not known:
                if f["field"] in fills:
                    unknown.append(f["field"])
                continue
            if fill is None:
                f.pop("default", None)
            else:
                f["default"] = fill
    return schema, sorted(set(unknown))


def refuse_unknown_fill(topic: str, ident: str, columns: list[str]) -> LakeSchemaError:
    return LakeSchemaError(
        f"topic {topic}: lake table {ident} has no key, and its source table gained column(s) {columns} whose values "
        "in the rows that existed before cannot be known from the events (a default evaluated per row, or a table "
        "rewritten since the column was added): without a key the lake cannot re-read them. Nothing of this topic was "
        "written. Rebuild the lake table from a new snapshot (`walflow reset <connector> --lake`, then the setup "
        "DAG), or give the source table a primary key and snapshot it again."
    )
