"""walflow.lake.evolution: attribute numbers are read among the facts of one relation only (a table dropped and
created again under its name numbers its attributes anew)."""

from __future__ import annotations

from typing import Any

from walflow.lake.evolution import ATTNUMS_PROPERTY, RELATION_PROPERTY, TableFacts, attnum_properties, read_property


def fact(lsn: int, relation: int | None, *fields: tuple[str, int, Any, bool]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "lsn": lsn,
        "fields": [{"field": n, "attnum": a, "fill": f, "known": k, "type": "boolean"} for n, a, f, k in fields],
    }
    if relation is not None:
        doc["relation"] = relation
    return doc


FORMER = fact(10, 100, ("id", 1, None, True), ("c1", 4, True, True))
NEW = fact(20, 200, ("id", 1, None, True))
NEW_COLUMN = fact(30, 200, ("id", 1, None, True), ("c2", 4, None, True))


def test_a_new_columns_fill_comes_from_its_own_relations_facts() -> None:
    facts = TableFacts([FORMER, NEW, NEW_COLUMN])
    # across relations, attribute 4 was c1's first, with its fill true: the old reading
    assert facts.fills(NEW_COLUMN)["c2"] == (True, True)
    scoped = facts.of_relation(NEW_COLUMN)
    assert [f["lsn"] for f in scoped.facts] == [20, 30]
    assert scoped.fills(NEW_COLUMN)["c2"] == (True, None)
    assert scoped.adopt(["id", "c1"]) == {"id": 1}  # the former table's column has no attribute in the new one


def test_facts_that_name_no_relation_are_kept_as_before() -> None:
    older = fact(5, None, ("id", 1, None, True), ("c1", 4, False, True))
    facts = TableFacts([older, FORMER, NEW_COLUMN])
    assert [f["lsn"] for f in facts.of_relation(NEW_COLUMN).facts] == [5, 30]
    assert facts.of_relation(older) is facts


def test_attribute_numbers_recorded_for_another_relation_are_not_read() -> None:
    properties = {ATTNUMS_PROPERTY: '{"id": 1, "c1": 4}', RELATION_PROPERTY: "100"}
    assert read_property(properties, 100) == {"id": 1, "c1": 4}
    assert read_property(properties, 200) == {}
    assert read_property(properties) == {"id": 1, "c1": 4}
    # recorded before lake tables recorded their relation: read as before
    assert read_property({ATTNUMS_PROPERTY: '{"id": 1}'}, 200) == {"id": 1}


def test_attribute_numbers_are_written_with_their_relation_and_read_back() -> None:
    written = attnum_properties({"id": 1, "c1": 4}, 100)
    assert written == {ATTNUMS_PROPERTY: '{"id":1,"c1":4}', RELATION_PROPERTY: "100"}
    assert read_property(written, 100) == {"id": 1, "c1": 4}
    assert read_property(written, 200) == {}
    # facts of an older walflow name no relation: only the numbers are written
    assert attnum_properties({"id": 1}, None) == {ATTNUMS_PROPERTY: '{"id":1}'}
