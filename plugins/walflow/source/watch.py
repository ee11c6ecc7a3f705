"""What the catalog shows of captured tables between two batches, to recognise changes of their rows that no change
event carries.

Logical decoding streams the rows a statement writes, but PostgreSQL changes rows without writing them as changes:

- a table *rewrite* (``ALTER COLUMN ... TYPE ... USING``, ``ADD COLUMN`` with a volatile default, an identity or a
  ``serial`` column, a domain with constraints) writes every row into new storage, and decoding carries none of it;
- a table dropped and created again under its name (a migration tool's or a full refresh's way), or another table
  renamed onto its name, is another relation whose rows were not all decoded (a ``filtered`` publication did not hold
  it yet) and whose predecessor's rows are gone;
- ``ALTER TYPE ... RENAME VALUE`` changes the value every row holds of an enum label without touching a row;
- a column dropped and added again under its name, within one batch, is told from the column it replaced by no
  field of the events.

So each batch reads, for every captured table, one row of the catalog (:func:`observe`): the relation's OID, its
storage (``relfilenode``) and persistence, each live attribute's number, name and the transaction that last wrote its
catalog row and its default's (an ``ALTER COLUMN ... TYPE`` rewrites the attribute's row even to the same type), and
the labels of the enum types its columns use. :func:`changed` compares it with what the previous batch read and says
what happened. A new storage alone is no change of values (``VACUUM FULL``, ``CLUSTER``, ``TRUNCATE``, ``SET
TABLESPACE``): it counts only together with a change of the attributes' catalog rows, the mark of a rewrite that
computed new values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

#: every captured table's relation, storage, attributes and enum labels, in one query (``%s``: their OIDs). A
#: partitioned table (captured whole with ``publish.via.partition.root``) has no storage of its own: its partitions'
#: storage stands for it (the sum of their ``relfilenode``, which a rewrite of them all changes). An
#: attribute's catalog row and its default's carry the transaction that last wrote them (``xmin``: the raw id, which
#: freezing keeps); enum types are found through arrays and domains.
WATCH_SQL = """
SELECT c.oid, n.nspname, c.relname,
       CASE WHEN c.relkind = 'p'
            THEN (SELECT NULLIF(sum(l.relfilenode::bigint), 0)::bigint
                  FROM pg_catalog.pg_partition_tree(c.oid) t JOIN pg_catalog.pg_class l ON l.oid = t.relid
                  WHERE t.isleaf)
            ELSE NULLIF(c.relfilenode, 0)::bigint END,
       c.relpersistence::text,
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
       ARRAY(SELECT pg_catalog.jsonb_build_array(a.attnum, a.attname, a.xmin::text, COALESCE(d.xmin::text, ''))
             FROM pg_catalog.pg_attribute a
             LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum),
       ARRAY(WITH RECURSIVE used(oid) AS (
                 SELECT a.atttypid FROM pg_catalog.pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                 UNION
                 SELECT x.oid FROM used u JOIN pg_catalog.pg_type t ON t.oid = u.oid,
                        LATERAL (VALUES (t.typelem), (t.typbasetype)) AS x(oid)
                 WHERE x.oid <> 0)
             SELECT pg_catalog.jsonb_build_array(e.oid::text, e.enumlabel)
             FROM pg_catalog.pg_enum e JOIN used ON used.oid = e.enumtypid
             ORDER BY e.oid)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = ANY(%s)
"""


@dataclass(frozen=True)
class Observed:
    """One captured table as the catalog showed it to one batch (see the module's docstring)."""

    oid: int
    filenode: int | None
    persistence: str
    #: whether it has a primary key (a table without one cannot be re-read by key)
    keyed: bool
    #: (attribute number, name, the id of the transaction that last wrote its catalog row, its default's or "")
    attributes: tuple[tuple[int, str, str, str], ...]
    #: (pg_enum OID, label) of the enum types its columns use
    labels: tuple[tuple[str, str], ...]

    def to_state(self) -> dict[str, Any]:
        return {
            "oid": self.oid,
            "filenode": self.filenode,
            "persistence": self.persistence,
            "keyed": self.keyed,
            "attributes": [list(a) for a in self.attributes],
            "labels": [list(x) for x in self.labels],
        }

    @classmethod
    def from_state(cls, raw: dict[str, Any]) -> Observed:
        return cls(
            int(raw["oid"]),
            int(raw["filenode"]) if raw.get("filenode") else None,
            str(raw.get("persistence") or "p"),
            bool(raw.get("keyed")),
            tuple((int(a[0]), str(a[1]), str(a[2]), str(a[3])) for a in raw.get("attributes") or ()),
            tuple((str(x[0]), str(x[1])) for x in raw.get("labels") or ()),
        )


def observe(conn: psycopg.Connection, oids: list[int]) -> dict[tuple[str, str], Observed]:
    """What the catalog shows now of the tables ``oids``, by (schema, table)."""
    if not oids:
        return {}
    with conn.cursor() as cur:
        cur.execute(WATCH_SQL, (oids,))
        rows = cur.fetchall()
    out = {}
    for oid, schema, table, filenode, persistence, keyed, attributes, labels in rows:
        out[(schema, table)] = Observed(
            int(oid),
            int(filenode) if filenode else None,
            persistence,
            bool(keyed),
            tuple((int(a[0]), str(a[1]), str(a[2]), str(a[3])) for a in attributes),
            tuple((str(x[0]), str(x[1])) for x in labels),
        )
    return out


def changed(before: Observed, now: Observed) -> str | None:
    """What changed the table's rows without change events between two observations (None: nothing did).

    A column dropped and added again counts only where the schema facts cannot tell it from the column it replaced
    (:func:`readded_unclear`), or the table has a key (its re-read is exact either way)."""
    if before.oid != now.oid:
        return (
            f"it is another relation now (OID {before.oid} -> {now.oid}): the table was dropped and created again, or "
            "another table was renamed onto its name, so its rows are not the ones streamed so far"
        )
    old_names = {name: attnum for attnum, name, _x, _d in before.attributes}
    live = {attnum for attnum, _n, _x, _d in now.attributes}
    # a name at another attribute whose own attribute is gone (a rename that swaps two names keeps both attributes)
    readded = sorted(
        name
        for attnum, name, _x, _d in now.attributes
        if name in old_names and old_names[name] != attnum and old_names[name] not in live
    )
    if readded and (now.keyed or readded_unclear(before, now)):
        return (
            f"column(s) {readded} were dropped and added again under the same name: the rows hold the new columns' "
            "values, which no event carried"
        )
    if before.persistence != now.persistence:
        return (
            f"it was set {'UNLOGGED' if now.persistence == 'u' else 'LOGGED'} (persistence {before.persistence!r} -> "
            f"{now.persistence!r}): while unlogged its changes were not written to the WAL, so they were never decoded"
        )
    old = {a[0]: a for a in before.attributes}
    # attributes added or whose catalog rows were written since (a column only dropped changes no other value)
    touched = sorted(
        name for attnum, name, xmin, dxmin in now.attributes if old.get(attnum) != (attnum, name, xmin, dxmin)
    )
    if before.filenode != now.filenode and touched:
        return (
            f"its rows were rewritten (relfilenode {before.filenode} -> {now.filenode}) by a statement that changed "
            f"column(s) {touched}: a type change (ALTER COLUMN ... TYPE ... USING), or a column added with a value "
            "computed per row (a volatile default, an identity or serial column, a domain with constraints), which no "
            "event carries"
        )
    old_labels = dict(before.labels)
    renamed = sorted(
        f"{old_labels[oid]!r} -> {label!r}"
        for oid, label in now.labels
        if oid in old_labels and old_labels[oid] != label
    )
    if renamed:
        return (
            f"enum value(s) it holds were renamed ({', '.join(renamed)}: ALTER TYPE ... RENAME VALUE), which changes "
            "rows without events"
        )
    return None


def readded_unclear(before: Observed, now: Observed) -> bool:
    """Whether a column dropped and added again under its name may be taken for the old one by the schema facts.

    The facts read the catalog when the stream meets a table's Relation message, which may be older than the
    catalog: a message listing the old column maps it to the new attribute of that name unless some attribute still
    live now lies between the two numbers (the message would list it after the old column, not before the new one;
    :func:`walflow.capture.schema_facts.build_fact`). Without one, nothing tells them apart.
    """
    old = {name: attnum for attnum, name, _x, _d in before.attributes}
    live = [attnum for attnum, _n, _x, _d in now.attributes]
    for attnum, name, _x, _d in now.attributes:
        was = old.get(name)
        if was is not None and was != attnum and was not in live and not any(was < a < attnum for a in live):
            return True
    return False
