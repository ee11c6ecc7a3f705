"""What the source catalog says about a captured table: nullability, keys, types, defaults.

pgoutput's Relation message names each column's type OID and modifier, but not whether it is NOT NULL,
what the primary key is (its key flags follow the replica identity, which is every column under
REPLICA IDENTITY FULL), nor what a domain or enum type stands for. Debezium reads these from the catalog;
so does this module, once per Relation message, on a connection of its own.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ColumnType:
    """What the catalog says about a column's type, enough to choose its converter."""

    oid: int
    modifier: int = -1
    name: str = ""  # format_type() text, e.g. 'numeric(10,2)' or 'character varying(255)'
    base_name: str = ""  # pg_type.typname of the type (or of a domain's base type)
    category: str = ""  # pg_type.typcategory
    enum_values: tuple[str, ...] = ()
    element: ColumnType | None = None  # element type of an array
    #: declared dimensions of an array column (pg_attribute.attndims; 0 or 1 for one dimension)
    ndims: int = 1
    #: pg_type.typname of the column's own type (the domain's, the array's ``_int4``), as Debezium names it
    type_name: str = ""
    #: pg_type.typdelim: what separates this type's values in an array literal (``:`` for PostGIS geometry)
    delimiter: str = ","


@dataclass(frozen=True)
class CatalogColumn:
    name: str
    not_null: bool
    type: ColumnType
    default_expr: str | None
    #: pg_attribute.atttypid (the domain itself for a domain column), as pgoutput's Relation reports it
    attr_type_oid: int
    #: the default's text form when it is a constant literal, cast by the server to the column's type
    default_text: str | None = None
    #: true when the default is computed by an explicit function call (nextval(...), now(), CURRENT_TIMESTAMP(6) ...)
    default_is_function: bool = False
    #: pg_attribute.atttypmod, as pgoutput's Relation reports it
    attr_type_modifier: int = -1
    attnum: int = 0
    #: a generated column (pgoutput leaves those out of its Relation and tuples)
    generated: bool = False
    #: pg_attribute.attmissingval as text (a one-element array) when atthasmissing: what rows older than the
    #: column hold in it (see :mod:`walflow.capture.schema_facts`)
    missing: str | None = None
    #: a default that is no pg_attrdef row: an identity column's sequence, or its domain's default (rows older than
    #: the column hold its values, not NULL)
    implicit_default: bool = False


@dataclass(frozen=True)
class CatalogTable:
    oid: int
    schema: str
    name: str
    columns: dict[str, CatalogColumn]
    primary_key: tuple[str, ...]
    replica_identity: str
    #: the event key: the primary key, else the first unique index in the JDBC driver's order (a clustered one
    #: first, then by name; partial ones too) whose columns are plain columns, as Debezium picks it (not the
    #: replica identity index); empty when the table has none of them (null key)
    key_columns: tuple[str, ...] = ()
    #: every attribute in attnum order as (attnum, name), ``None`` as the name of a dropped one; generated
    #: columns are left out (pgoutput never sends them). Used to recognise renamed columns mid-stream.
    attributes: tuple[tuple[int, str | None], ...] = ()
    #: looks up a type by OID and modifier (for Relation columns the catalog no longer describes)
    types: TypeResolver | None = field(default=None, compare=False, repr=False)
    #: ``pg_class.relfilenode`` when read: a rewrite of the table (a volatile default, a type change, VACUUM FULL,
    #: TRUNCATE) gives it another, so an unchanged one proves no rewrite happened in between (None: a partitioned
    #: parent or a mapped catalog, which have none of their own)
    filenode: int | None = None
    #: the highest attribute number when read, dropped ones included: numbers only grow, so a column numbered
    #: above it was added after this read
    last_attnum: int = 0


_COLUMNS_SQL = """
SELECT a.attname,
       a.attnum,
       a.attisdropped,
       a.attgenerated <> '',
       a.atttypid,
       a.atttypmod,
       a.attndims,
       a.attnotnull,
       pg_catalog.pg_get_expr(d.adbin, d.adrelid),
       pg_catalog.format_type(a.atttypid, a.atttypmod),
       CASE WHEN a.atthasmissing THEN a.attmissingval::text END,
       -- a value computed per row for rows that existed before the column: an identity, or a domain's default
       a.attidentity <> ''
         OR EXISTS (SELECT 1 FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid AND t.typdefaultbin IS NOT NULL)
FROM pg_catalog.pg_attribute a
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %s AND a.attnum > 0
ORDER BY a.attnum
"""

_INDEX_COLUMNS = """
ARRAY(SELECT a.attname
      FROM pg_catalog.unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
      ORDER BY k.ord)
"""

_TABLE_SQL = f"""
SELECT n.nspname, c.relname, c.relreplident, NULLIF(c.relfilenode, 0),
       (SELECT {_INDEX_COLUMNS} FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
       (SELECT {_INDEX_COLUMNS} FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisreplident),
       (SELECT {_INDEX_COLUMNS}
        FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
        WHERE i.indrelid = c.oid AND i.indisunique AND NOT i.indisprimary AND i.indexprs IS NULL
        ORDER BY NOT i.indisclustered, ic.relname
        LIMIT 1)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = %s
"""

_TYPES_SQL = """
SELECT t.oid, t.typname, t.typtype, t.typcategory, t.typbasetype, t.typtypmod, t.typelem,
       CASE WHEN t.typtype = 'e'
            THEN ARRAY(SELECT e.enumlabel FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder)
       END,
       pg_catalog.format_type(t.oid, NULL), t.typdelim
FROM pg_catalog.pg_type t
WHERE t.oid = ANY(%s)
"""


@dataclass(frozen=True)
class _TypeRow:
    oid: int
    typname: str
    typtype: str
    category: str
    basetype: int
    typtypmod: int
    elem: int
    enum_values: tuple[str, ...]
    display: str
    delimiter: str = ","


class TypeResolver:
    """Type metadata by OID from ``pg_type``, cached per OID: base type of (nested) domains, enum labels, arrays.

    Relation messages name a column's type only by OID; this turns an OID and modifier into the
    :class:`ColumnType` its converter needs, whether or not the column still exists in the catalog.
    """

    def __init__(self, conn: psycopg.Connection) -> None:
        self._conn = conn
        self._rows: dict[int, _TypeRow | None] = {}
        self._names: dict[tuple[int, int], str] = {}

    def clear(self) -> None:
        """Forget every cached type (enum labels can change with ``ALTER TYPE ... ADD VALUE``)."""
        self._rows.clear()
        self._names.clear()

    def load(self, oids: Iterable[int]) -> None:
        """Fetch the given types, and every base and element type they refer to, in as few queries as possible."""
        wanted = {o for o in oids if o and o not in self._rows}
        while wanted:
            with self._conn.cursor() as cur:
                cur.execute(_TYPES_SQL, (list(wanted),))
                found = cur.fetchall()
            for oid in wanted:
                self._rows[oid] = None
            refer: set[int] = set()
            for oid, typname, typtype, category, basetype, typtypmod, elem, enum_values, display, delimiter in found:
                self._rows[oid] = _TypeRow(
                    oid,
                    typname,
                    typtype,
                    category,
                    basetype,
                    typtypmod,
                    elem,
                    tuple(enum_values or ()),
                    display,
                    delimiter or ",",
                )
                refer.update(o for o in (basetype, elem) if o)
            wanted = {o for o in refer if o not in self._rows}

    def resolve(self, oid: int, modifier: int = -1, ndims: int = 1, name: str | None = None) -> ColumnType:
        """The :class:`ColumnType` of a column of type ``oid``; a bare one when the type no longer exists.

        A domain is represented as its base type, found through any number of domain levels. Its length or
        scale is the nearest one the chain declares: a domain over another domain (whose own ``typtypmod`` is -1)
        has the inner domain's, as Debezium 3.6 resolves it (``price2`` over ``numeric(8,3)`` is a Decimal(8,3)).
        """
        self.load((oid,))
        row = self._rows.get(oid)
        if row is None:
            return ColumnType(oid=oid, modifier=modifier, name=name or "")
        display = name or self._format(oid, modifier, row)
        own_name = row.typname
        if row.typtype == "d":
            modifier = row.typtypmod
            base = row
            for _ in range(64):  # a domain chain is finite; the bound only guards a corrupt catalog
                if base.typtype != "d":
                    break
                self.load((base.basetype,))
                nxt = self._rows.get(base.basetype)
                if nxt is None:
                    return ColumnType(oid=oid, modifier=modifier, name=display)
                base = nxt
                if modifier < 0 and base.typtype == "d":
                    modifier = base.typtypmod
            row = base
        element = None
        if row.category == "A" and row.elem:
            # an array column's modifier (numeric(10,2)[]) is its elements' modifier
            element = self.resolve(row.elem, modifier)
        return ColumnType(
            oid=row.oid,
            modifier=modifier,
            name=display,
            base_name=row.typname,
            category=row.category,
            enum_values=row.enum_values,
            element=element,
            ndims=max(1, ndims),
            type_name=own_name,
            delimiter=row.delimiter,
        )

    def type_name(self, oid: int, modifier: int = -1) -> str | None:
        """SQL name of a type with its modifier (``numeric(5,2)``), quoted by the server; ``None`` if unknown."""
        self.load((oid,))
        row = self._rows.get(oid)
        return None if row is None else self._format(oid, modifier, row)

    def _format(self, oid: int, modifier: int, row: _TypeRow) -> str:
        if modifier < 0:
            return row.display
        key = (oid, modifier)
        if key not in self._names:
            with self._conn.cursor() as cur:
                cur.execute("SELECT pg_catalog.format_type(%s, %s)", (oid, modifier))
                found = cur.fetchone()
            self._names[key] = found[0] if found and found[0] else row.display
        return self._names[key]


class Catalog:
    """Reads table definitions from the source catalog, caching them per relation OID.

    The cache is invalidated by :meth:`forget` whenever a new Relation message announces a change.
    """

    def __init__(self, conn: psycopg.Connection) -> None:
        self._conn = conn
        self._cache: dict[int, CatalogTable | None] = {}
        self.types = TypeResolver(conn)

    def forget(self, oid: int) -> None:
        self._cache.pop(oid, None)
        # a new Relation message may follow a type change too (enum labels added): read types afresh
        self.types.clear()

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
            schema, name, replident, filenode, pk, _identity_index, unique_index = row
            cur.execute(_COLUMNS_SQL, (oid,))
            attrs = cur.fetchall()
        self.types.load(a[4] for a in attrs if not a[2])
        columns: dict[str, CatalogColumn] = {}
        attributes: list[tuple[int, str | None]] = []
        for (
            attname,
            attnum,
            dropped,
            generated,
            typoid,
            typmod,
            ndims,
            notnull,
            default_expr,
            formatted,
            missing,
            implicit,
        ) in attrs:
            if dropped:
                attributes.append((attnum, None))
                continue
            if not generated:
                attributes.append((attnum, attname))
            column = CatalogColumn(
                attname,
                notnull,
                self.types.resolve(typoid, typmod, ndims, formatted),
                default_expr,
                typoid,
                attr_type_modifier=typmod,
                attnum=attnum,
                generated=generated,
                missing=missing,
                implicit_default=bool(implicit),
            )
            if default_expr is not None and not generated:
                column = self._with_default(column)
            columns[attname] = column
        if pk:
            key: tuple[str, ...] = tuple(pk)
        else:
            key = tuple(unique_index or ())
        table = CatalogTable(
            oid,
            schema,
            name,
            columns,
            tuple(pk or ()),
            replident,
            key,
            tuple(attributes),
            self.types,
            int(filenode) if filenode else None,
            max((a[1] for a in attrs), default=0),
        )
        self._cache[oid] = table
        return table

    def _with_default(self, column: CatalogColumn) -> CatalogColumn:
        """Classify a column default and, for a constant literal, get its text form from the server.

        Only a single literal (a quoted string, a number or a boolean, with any casts) is ever evaluated, and
        then as ``CAST(<literal as a parameter> AS <the column's base type>)``: the catalog's expression text is
        never executed, so an operator or function with side effects in a default cannot run here.
        """
        expr = column.default_expr or ""
        if is_function_default(expr):
            return replace(column, default_is_function=True)
        literal = literal_default(expr)
        if literal is None:
            return column
        # cast to the base type: a domain's CHECK constraints (possibly user functions) are not evaluated
        target = self.types.type_name(column.type.oid, column.type.modifier)
        if target is None:
            return column
        try:
            with self._conn.transaction(), self._conn.cursor() as cur:
                cur.execute(sql.SQL("SELECT CAST(CAST(%s AS text) AS {})::text").format(sql.SQL(target)), (literal,))
                found = cur.fetchone()
        except psycopg.Error as exc:
            log.debug("default %r of column %s is not a constant of its type: %s", expr, column.name, exc)
            return column
        return replace(column, default_text=found[0] if found else None)


_QUOTED = re.compile(r"'(?:[^']|'')*'")
_CASTS = re.compile(r"::\s*[\w\s.\"\[\]]+?(?:\(\s*\d+(?:\s*,\s*\d+)?\s*\))?(?=$|[\s),:])")
_FUNCTION_CALL = re.compile(r"[A-Za-z_][\w.\"]*\s*\(")
#: one cast as pg_get_expr prints it: '::' and a type name, optionally with modifiers and array brackets
_CAST = (
    r"\s*::\s*(?:[A-Za-z_][\w$]*|\"(?:[^\"]|\"\")+\")"  # '::' and a name, plain or quoted
    r"(?:\s*\.\s*(?:[A-Za-z_][\w$]*|\"(?:[^\"]|\"\")+\"))?"  # its schema-qualified part
    r"(?:\s+[A-Za-z_]+)*"  # words of a multi-word name (double precision, character varying)
    r"(?:\s*\(\s*\d+(?:\s*,\s*\d+)?\s*\))?"  # modifiers
    r"(?:\s+[A-Za-z_]+)*"  # words after them (with time zone)
    r"(?:\s*\[\d*\])*"  # array brackets
)
_LITERAL_DEFAULT = re.compile(
    r"^\s*\(*\s*(?:'(?P<string>(?:[^']|'')*)'|(?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|(?P<bool>true|false))"
    rf"(?:\s*\)*(?:{_CAST}))*\s*\)*\s*$",
    re.IGNORECASE,
)


def is_function_default(expr: str) -> bool:
    """True when a column default calls a function explicitly (``nextval(...)``, ``now()``, ``CURRENT_TIMESTAMP(6)``).

    As the reference says, only explicit function calls count: ``CURRENT_TIMESTAMP`` without parentheses is
    neither a literal nor a function call, and gets no default in the schema.
    """
    bare = _CASTS.sub("", _QUOTED.sub("''", expr))
    return bool(_FUNCTION_CALL.search(bare))


def literal_default(expr: str) -> str | None:
    """The literal of a constant default (``'abc'::text`` → ``abc``, ``42``, ``true``), else ``None``."""
    match = _LITERAL_DEFAULT.match(expr)
    if match is None:
        return None
    if match.group("string") is not None:
        return match.group("string").replace("''", "'")
    if match.group("number") is not None:
        return match.group("number")
    return match.group("bool").lower()
