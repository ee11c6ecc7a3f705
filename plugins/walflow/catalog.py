"""What the source catalog says about a captured table: nullability, primary key, types.

pgoutput's Relation message names each column's type OID and modifier, but not whether it is NOT NULL,
what the primary key is (its key flags follow the replica identity, which is every column under
REPLICA IDENTITY FULL), nor what a domain or enum type stands for. Debezium reads these from the catalog;
so does this module, once per Relation message, on a connection of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import psycopg

from walflow.convert import ColumnType


@dataclass(frozen=True)
class CatalogColumn:
    name: str
    not_null: bool
    type: ColumnType
    default_expr: str | None
    #: pg_attribute.atttypid (the domain itself for a domain column), as pgoutput's Relation reports it
    attr_type_oid: int
    #: the default's text form when it is a constant, evaluated by the server under the session settings
    default_text: str | None = None
    #: true when the default is computed by a function (nextval, now(), CURRENT_TIMESTAMP ...)
    default_is_function: bool = False


@dataclass(frozen=True)
class CatalogTable:
    oid: int
    schema: str
    name: str
    columns: dict[str, CatalogColumn]
    primary_key: tuple[str, ...]
    replica_identity: str


_COLUMNS_SQL = """
SELECT a.attname,
       a.atttypid,
       a.attnotnull,
       pg_catalog.pg_get_expr(d.adbin, d.adrelid),
       pg_catalog.format_type(a.atttypid, a.atttypmod),
       -- a domain is represented as its base type, with the base type's modifier
       CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END,
       CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END,
       bt.typname,
       bt.typcategory,
       CASE WHEN bt.typtype = 'e'
            THEN ARRAY(SELECT e.enumlabel FROM pg_catalog.pg_enum e WHERE e.enumtypid = bt.oid ORDER BY e.enumsortorder)
       END,
       bt.typelem,
       et.typname,
       et.typcategory
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
JOIN pg_catalog.pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END
LEFT JOIN pg_catalog.pg_type et ON et.oid = bt.typelem AND bt.typcategory = 'A'
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_TABLE_SQL = """
SELECT n.nspname, c.relname, c.relreplident,
       ARRAY(SELECT a.attname
             FROM pg_catalog.pg_index i
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = c.oid AND i.indisprimary
             ORDER BY k.ord)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = %s
"""


class Catalog:
    """Reads table definitions from the source catalog, caching them per relation OID.

    The cache is invalidated by :meth:`forget` whenever a new Relation message announces a change.
    """

    def __init__(self, conn: psycopg.Connection) -> None:
        self._conn = conn
        self._cache: dict[int, CatalogTable | None] = {}

    def forget(self, oid: int) -> None:
        self._cache.pop(oid, None)

    def table(self, oid: int) -> CatalogTable | None:
        """Return the table's definition, or ``None`` when it no longer exists (dropped since)."""
        if oid in self._cache:
            return self._cache[oid]
        with self._conn.cursor() as cur:
            cur.execute(_TABLE_SQL, (oid,))
            row = cur.fetchone()
            if row is None:
                self._cache[oid] = None
                return None
            schema, name, replident, pk = row
            cur.execute(_COLUMNS_SQL, (oid,))
            columns = {}
            for (
                attname,
                attr_type_oid,
                notnull,
                default_expr,
                formatted,
                type_oid,
                typmod,
                typname,
                category,
                enum_values,
                _elem_oid,
                elem_name,
                elem_category,
            ) in cur.fetchall():
                element = None
                if category == "A" and _elem_oid:
                    # an array column's modifier (numeric(10,2)[]) is its elements' modifier
                    element = ColumnType(
                        oid=_elem_oid, modifier=typmod, name=elem_name or "", base_name=elem_name or "", category=elem_category or ""
                    )
                columns[attname] = CatalogColumn(
                    attname,
                    notnull,
                    ColumnType(
                        oid=type_oid,
                        modifier=typmod,
                        name=formatted,
                        base_name=typname,
                        category=category,
                        enum_values=tuple(enum_values or ()),
                        element=element,
                    ),
                    default_expr,
                    attr_type_oid,
                )
            for colname, column in list(columns.items()):
                if column.default_expr is None:
                    continue
                if _is_function_default(column.default_expr):
                    columns[colname] = replace(column, default_is_function=True)
                    continue
                try:
                    # A constant expression from the catalog, not user input: evaluating it is side-effect free,
                    # and its text form is exactly what pgoutput would send for the same value.
                    cur.execute(f"SELECT ({column.default_expr})::text")  # type: ignore[arg-type]
                    row = cur.fetchone()
                    columns[colname] = replace(column, default_text=row[0] if row else None)
                except psycopg.Error:
                    if not self._conn.autocommit:
                        self._conn.rollback()
        table = CatalogTable(oid, schema, name, columns, tuple(pk or ()), replident)
        self._cache[oid] = table
        return table


_QUOTED = re.compile(r"'(?:[^']|'')*'")
_CASTS = re.compile(r"::\s*[\w\s.\"\[\]]+?(?:\(\s*\d+(?:\s*,\s*\d+)?\s*\))?(?=$|[\s),:])")
_FUNCTION_CALL = re.compile(r"[A-Za-z_][\w.\"]*\s*\(")
_SQL_VALUE_FUNCTIONS = re.compile(
    r"\b(CURRENT_DATE|CURRENT_TIME|CURRENT_TIMESTAMP|LOCALTIME|LOCALTIMESTAMP|CURRENT_USER|SESSION_USER|USER|CURRENT_ROLE|CURRENT_CATALOG|CURRENT_SCHEMA)\b",
    re.IGNORECASE,
)


def _is_function_default(expr: str) -> bool:
    """True when a column default is computed (nextval, now(), CURRENT_TIMESTAMP, ...) rather than a literal."""
    bare = _CASTS.sub("", _QUOTED.sub("''", expr))
    return bool(_FUNCTION_CALL.search(bare) or _SQL_VALUE_FUNCTIONS.search(bare))
