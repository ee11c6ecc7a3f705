"""DDL facts: a table's key as each DDL left it, read from the WAL instead of from the catalog of now.

The stream learns a table's definition when it reaches a change of the table after a Relation message, and reads
the key from the catalog then, which may be after later DDL of the same batch: ``ALTER TABLE t REPLICA IDENTITY
FULL``, an update, then ``ALTER TABLE t DROP CONSTRAINT t_pkey`` would key the update by the catalog's (no key)
where Debezium, reading the catalog as it streams, keys it by the primary key it had. With the event trigger of
``walflow's ddl_facts.sql`` installed (a superuser's step), every DDL of a table writes a transactional logical
decoding message (prefix :data:`PREFIX`) with the key as the DDL left it; the stream reads it in WAL order, so each
change is keyed by the fact in force at its position (:meth:`DdlFacts.apply`). Facts are kept in the connector's
state with their LSN, so that a batch starting after a DDL still knows it. Without the trigger, the catalog is read
as before, and the task log says which mode is in force.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import orjson
import psycopg

if TYPE_CHECKING:
    from walflow.source.catalog import CatalogTable
    from walflow.source.state import StateStore

log = logging.getLogger("walflow.capture.stream")

#: the prefix of the trigger's messages
PREFIX = "walflow.ddl"
#: the event trigger's name (walflow's ddl_facts.sql)
TRIGGER = "walflow_ddl_facts"
#: state keys: ``ddl:<relation oid>``
STATE_PREFIX = "ddl:"


@dataclass(frozen=True)
class DdlFact:
    """A table's key as one DDL left it, at the LSN of the DDL's message: attribute numbers, which renames keep."""

    oid: int
    schema: str
    table: str
    primary_key: tuple[int, ...]
    unique_key: tuple[int, ...]
    lsn: int

    @property
    def key(self) -> tuple[int, ...]:
        """The event key: the primary key, else the first unique index (the catalog reader's rule)."""
        return self.primary_key or self.unique_key

    @classmethod
    def parse(cls, content: bytes, lsn: int) -> DdlFact | None:
        """The fact in a message's content, or None (logged) for content that is not one: a message under this
        prefix from anything but the trigger is ignored, never trusted to key a table."""
        try:
            raw = orjson.loads(content)
            return cls(
                int(raw["oid"]),
                str(raw["schema"]),
                str(raw["table"]),
                tuple(int(c) for c in raw["primary_key"]),
                tuple(int(c) for c in raw["unique_key"]),
                lsn,
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.warning("a %r message at LSN %s is not a DDL fact (%s); ignored", PREFIX, lsn, exc)
            return None

    def to_state(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "table": self.table,
            "primary_key": list(self.primary_key),
            "unique_key": list(self.unique_key),
            "lsn": self.lsn,
        }

    @classmethod
    def from_state(cls, oid: int, raw: dict[str, Any]) -> DdlFact:
        return cls(
            oid, raw["schema"], raw["table"], tuple(raw["primary_key"]), tuple(raw["unique_key"]), int(raw["lsn"])
        )


def trigger_enabled(conn: psycopg.Connection) -> bool:
    """Whether the database has walflow's DDL event trigger, enabled."""
    with conn.cursor() as cur:
        cur.execute("SELECT evtenabled <> 'D' FROM pg_catalog.pg_event_trigger WHERE evtname = %s", (TRIGGER,))
        row = cur.fetchone()
    return bool(row and row[0])


class DdlFacts:
    """The facts in force while a batch streams: those of the state written at or before the batch's start, then
    every fact the batch reads, in WAL order.

    :param start_lsn: where the batch starts reading: a fact recorded by a batch that read further and failed is
        read again from the WAL, so the state's copy is not used before its position.
    """

    def __init__(self, store: StateStore | None, start_lsn: int) -> None:
        self._store = store
        self._facts: dict[int, DdlFact] = {}
        if store is not None:
            for key, raw in store.prefixed(STATE_PREFIX).items():
                try:
                    fact = DdlFact.from_state(int(key[len(STATE_PREFIX) :]), raw)
                except (KeyError, TypeError, ValueError):
                    continue
                if fact.lsn <= start_lsn:
                    self._facts[fact.oid] = fact

    def observe(self, content: bytes, lsn: int) -> DdlFact | None:
        """Take the fact of a message read at ``lsn``; it keys the table's changes from here on."""
        fact = DdlFact.parse(content, lsn)
        if fact is None:
            return None
        self._facts[fact.oid] = fact
        if self._store is not None:
            self._store.put(f"{STATE_PREFIX}{fact.oid}", fact.to_state())
        log.info(
            "table %s.%s: key (attributes %s) from the DDL at LSN %s",
            fact.schema,
            fact.table,
            list(fact.key) or "none",
            lsn,
        )
        return fact

    def apply(self, table: CatalogTable | None) -> CatalogTable | None:
        """The catalog's definition with the key the latest fact gives (the catalog's own when there is none)."""
        if table is None:
            return None
        fact = self._facts.get(table.oid)
        if fact is None:
            return table
        names = dict(table.attributes)

        def named(attnums: tuple[int, ...]) -> tuple[str, ...]:
            found = tuple(names.get(a) or "" for a in attnums)
            # a key column dropped since the fact: no key (Debezium keeps only key columns the table still has)
            return found if all(found) else ()

        return replace(table, primary_key=named(fact.primary_key), key_columns=named(fact.key))
