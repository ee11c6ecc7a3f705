"""walflow.source.ddl_facts alone: a DDL fact's parsing, the key it gives a table (by attribute number), and which facts
of the state a batch may use."""

from __future__ import annotations

from typing import Any

import orjson

from walflow.source.catalog import CatalogTable
from walflow.source.ddl_facts import STATE_PREFIX, DdlFact, DdlFacts


class Store:
    """The two StateStore methods DdlFacts uses, in memory."""

    def __init__(self, rows: dict[str, Any] | None = None) -> None:
        self.rows = dict(rows or {})

    def prefixed(self, prefix: str) -> dict[str, Any]:
        return {k: v for k, v in self.rows.items() if k.startswith(prefix)}

    def put(self, key: str, value: Any) -> None:
        self.rows[key] = value


def table(attributes: tuple[tuple[int, str | None], ...], key: tuple[str, ...] = ()) -> CatalogTable:
    return CatalogTable(16384, "public", "t", {}, key, "f", key, attributes)


def message(primary: list[int], unique: list[int] | None = None) -> bytes:
    return orjson.dumps(
        {
            "v": 1,
            "oid": 16384,
            "schema": "public",
            "table": "t",
            "identity": "f",
            "primary_key": primary,
            "unique_key": unique or [],
        }
    )


def test_a_fact_keys_the_table_by_the_attributes_it_names_whatever_they_are_called_now() -> None:
    facts = DdlFacts(None, 0)
    facts.observe(message([1]), 100)
    # the catalog of now has no key, and attribute 1 was renamed since
    keyed = facts.apply(table(((1, "id"), (2, "text"))))
    assert keyed is not None and keyed.key_columns == ("id",) and keyed.primary_key == ("id",)


def test_without_a_primary_key_the_unique_index_is_the_key_and_a_dropped_key_column_leaves_none() -> None:
    facts = DdlFacts(None, 0)
    facts.observe(message([], [2, 1]), 100)
    keyed = facts.apply(table(((1, "a"), (2, "b"))))
    assert keyed is not None and keyed.key_columns == ("b", "a") and keyed.primary_key == ()
    dropped = facts.apply(table(((1, "a"), (2, None))))
    assert dropped is not None and dropped.key_columns == ()


def test_a_table_without_a_fact_keeps_the_catalogs_key() -> None:
    facts = DdlFacts(None, 0)
    original = table(((1, "id"),), ("id",))
    assert facts.apply(original) is original
    assert facts.apply(None) is None


def test_content_that_is_not_a_fact_is_ignored() -> None:
    facts = DdlFacts(None, 0)
    assert facts.observe(b"DROP TABLE x", 5) is None
    assert facts.observe(orjson.dumps({"oid": "x"}), 6) is None
    original = table(((1, "id"),), ("id",))
    assert facts.apply(original) is original


def test_the_state_keeps_facts_and_a_batch_uses_those_at_or_before_its_start() -> None:
    store = Store()
    DdlFacts(store, 0).observe(message([1]), 100)  # type: ignore[arg-type]
    assert store.rows[f"{STATE_PREFIX}16384"]["lsn"] == 100
    later = DdlFacts(store, 200)  # type: ignore[arg-type]
    keyed = later.apply(table(((1, "id"),)))
    assert keyed is not None and keyed.key_columns == ("id",)
    # a batch starting before the fact reads it again from the WAL: the state's copy is not in force yet
    earlier = DdlFacts(store, 50)  # type: ignore[arg-type]
    original = table(((1, "id"),))
    assert earlier.apply(original) is original


def test_parse_round_trips_through_the_state() -> None:
    fact = DdlFact.parse(message([1, 2]), 7)
    assert fact is not None and fact.key == (1, 2)
    assert DdlFact.from_state(fact.oid, fact.to_state()) == fact
