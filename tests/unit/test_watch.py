"""Issue 45: what the catalog shows of a table between two batches, and which changes of it changed its rows without
change events (:mod:`walflow.source.watch`)."""

from __future__ import annotations

from dataclasses import replace

from walflow.source.watch import Observed, changed, readded_unclear

#: id, qty and name, each catalog row written by transaction 700
BASE = Observed(
    oid=16384,
    filenode=16384,
    persistence="p",
    keyed=True,
    attributes=((1, "id", "700", ""), (2, "qty", "700", ""), (3, "name", "700", "")),
    labels=(("16400", "sad"), ("16401", "ok")),
)


def test_nothing_changed_and_new_storage_alone_change_no_value() -> None:
    assert changed(BASE, BASE) is None
    # VACUUM FULL, CLUSTER, TRUNCATE, SET TABLESPACE: other storage, the same attributes
    assert changed(BASE, replace(BASE, filenode=16999)) is None
    # a column dropped by a rewrite changes no other value; one renamed or given a default, without a rewrite, none
    assert changed(BASE, replace(BASE, filenode=16999, attributes=BASE.attributes[:2])) is None
    renamed = replace(BASE, attributes=(*BASE.attributes[:2], (3, "title", "701", "701")))
    assert changed(BASE, renamed) is None
    # two names swapped by renames keep their attributes
    swapped = replace(BASE, attributes=((1, "id", "700", ""), (2, "name", "701", ""), (3, "qty", "701", "")))
    assert changed(BASE, swapped) is None


def test_a_rewrite_that_computed_values_is_a_change() -> None:
    # ALTER COLUMN qty TYPE bigint USING qty * 100 (even to the same type): new storage, the attribute's row rewritten
    typed = replace(
        BASE, filenode=16999, attributes=((1, "id", "700", ""), (2, "qty", "702", ""), (3, "name", "700", ""))
    )
    assert "rewritten" in (changed(BASE, typed) or "") and "['qty']" in (changed(BASE, typed) or "")
    # ADD COLUMN x int GENERATED ALWAYS AS IDENTITY (or DEFAULT random(), a serial, a domain with a CHECK)
    added = replace(BASE, filenode=16999, attributes=(*BASE.attributes, (4, "x", "703", "")))
    assert "['x']" in (changed(BASE, added) or "")


def test_another_relation_under_the_name_is_a_change() -> None:
    assert "another relation" in (changed(BASE, replace(BASE, oid=17000, filenode=17000)) or "")


def test_a_renamed_enum_label_is_a_change_and_a_new_one_is_not() -> None:
    assert "'sad' -> 'unhappy'" in (changed(BASE, replace(BASE, labels=(("16400", "unhappy"), ("16401", "ok")))) or "")
    assert changed(BASE, replace(BASE, labels=(*BASE.labels, ("16402", "glad")))) is None


def test_unlogged_and_back_is_a_change() -> None:
    assert "UNLOGGED" in (changed(BASE, replace(BASE, persistence="u")) or "")


def test_a_column_dropped_and_added_again_counts_where_the_facts_cannot_tell() -> None:
    # name (3) dropped, added again as 4: nothing live between 3 and 4, so a Relation message listing the old one
    # reads as the new one
    last = replace(BASE, attributes=(*BASE.attributes[:2], (4, "name", "704", "704")))
    assert readded_unclear(BASE, last)
    assert "dropped and added again" in (changed(BASE, last) or "")
    assert "dropped and added again" in (changed(replace(BASE, keyed=False), replace(last, keyed=False)) or "")
    # qty (2) dropped, added again as 4 after name (3), which a message lists after the old qty: the facts tell
    middle = replace(BASE, attributes=((1, "id", "700", ""), (3, "name", "700", ""), (4, "qty", "704", "")))
    assert not readded_unclear(BASE, middle)
    assert changed(replace(BASE, keyed=False), replace(middle, keyed=False)) is None
    # with a key it is re-read anyway: exact whatever the facts say
    assert "dropped and added again" in (changed(BASE, middle) or "")
