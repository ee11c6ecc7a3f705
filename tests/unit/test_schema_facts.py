"""walflow.capture.schema_facts alone: what a fact says rows older than a column hold in it, when the catalog keeps no
value for them (``attmissingval``), from the table's storage (``relfilenode``) as walflow first saw it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from walflow.capture.schema_facts import _field, storage
from walflow.source.catalog import CatalogColumn, CatalogTable


@dataclass
class Converter:
    def convert(self, text: str) -> Any:
        return int(text)


@dataclass
class Spec:
    name: str
    converter: Converter


def table(filenode: int | None, last_attnum: int) -> CatalogTable:
    return CatalogTable(16384, "public", "t", {}, (), "f", (), (), None, filenode, last_attnum)


def column(attnum: int, default: str | None, missing: str | None = None) -> CatalogColumn:
    return CatalogColumn("c", False, None, default, 23, attnum=attnum, missing=missing)  # type: ignore[arg-type]


def test_the_storage_is_the_first_read_of_a_relfilenode_until_a_rewrite_gives_another() -> None:
    first = storage(table(500, 3))
    assert first == (500, 3)
    # read again after columns were added: the ceiling stays the first read's, so columns 4 and 5 are above it
    assert storage(table(500, 5), first) == (500, 3)
    # a rewrite (VACUUM FULL, a volatile default, a type change): a new relfilenode starts a new ceiling
    assert storage(table(501, 5), first) == (501, 5)
    # a partitioned parent has no storage of its own: nothing is known
    assert storage(table(None, 5), first) is None


def test_a_default_without_a_kept_value_is_known_null_only_without_a_rewrite() -> None:
    spec = Spec("c", Converter())
    # ADD COLUMN c int DEFAULT 5: the value is kept for older rows
    assert _field(spec, column(4, "5", "{5}")) == ("c", 4, 5, True)
    # ADD COLUMN c int (no default): NULL
    assert _field(spec, column(4, None)) == ("c", 4, None, True)
    # a default and no kept value: per row, lost to a rewrite, or set after the ADD COLUMN; only the caller's
    # storage comparison tells the last apart
    assert _field(spec, column(4, "-1")) == ("c", 4, None, False)
    assert _field(spec, column(4, "-1"), unrewritten=True) == ("c", 4, None, True)
