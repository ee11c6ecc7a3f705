"""A signal's ``additional-condition`` checked against the source server before it is evaluated, and the server's
errors about it told without the rows' values.

:func:`walflow.config.expressions.analyse_condition` proves the text is one expression over the snapshotted row and
lists what it names. Here that list meets the server's catalog, as the role that evaluates conditions sees it:

* every column it reads must be one the table's events carry unchanged: a column left out by
  ``column.include.list``/``column.exclude.list`` or masked, hashed or truncated by the column rules would
  otherwise be read through the condition (which rows get emitted, or an error quoting the value);
* no function, operator, cast or domain check it names may be VOLATILE (a function that can act: terminate a
  backend, move a slot, change a session setting, read a file) or SECURITY DEFINER (one that runs as its owner).
  A name stands for every function of that name the search path reaches, so an overload that acts refuses the
  name; the error names the function;
* the role itself (:func:`check_reader_role`) may not be a superuser, have REPLICATION or BYPASSRLS, or own the
  table: what a condition could still do, it does with the rights of a reader of the captured tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import psycopg

from walflow.config.expressions import Condition, analyse_condition
from walflow.errors import ExpressionError
from walflow.source.signals import first_line

if TYPE_CHECKING:
    from walflow.records.column_rules import ColumnRules
    from walflow.records.events import TableSchema
    from walflow.source.catalog import CatalogTable

#: How deep domain checks are followed (a domain over a domain over ...); deeper ones are refused.
_MAX_DEPTH = 8

#: SQLSTATE classes whose messages name only what the condition's author wrote or the server's state (syntax, names,
#: types, privileges, resources), never a row's values; the others (data exceptions such as ``invalid input syntax
#: for type integer: "<the value>"``, errors raised by functions) are told by their SQLSTATE alone.
_TOLD_CLASSES = frozenset({"08", "0A", "25", "42", "53", "54", "57"})

_FUNCTIONS_SQL = """
SELECT DISTINCT p.oid::regprocedure::text, p.provolatile = 'v', p.prosecdef
FROM unnest(%s::text[], %s::text[]) AS q(schema, name)
JOIN pg_proc p ON p.proname = q.name
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE (n.nspname = q.schema OR (q.schema IS NULL AND n.nspname = ANY (current_schemas(true))))
  AND (p.provolatile = 'v' OR p.prosecdef)
ORDER BY 1
"""

_OPERATORS_SQL = """
SELECT DISTINCT o.oid::regoperator::text || ' (' || p.oid::regprocedure::text || ')', p.provolatile = 'v', p.prosecdef
FROM unnest(%s::text[], %s::text[]) AS q(schema, name)
JOIN pg_operator o ON o.oprname = q.name
JOIN pg_namespace n ON n.oid = o.oprnamespace
JOIN pg_proc p ON p.oid = o.oprcode
WHERE (n.nspname = q.schema OR (q.schema IS NULL AND n.nspname = ANY (current_schemas(true))))
  AND (p.provolatile = 'v' OR p.prosecdef)
ORDER BY 1
"""

#: the type a cast names and the domains' base types under it: their input functions, the cast functions that end
#: in them, and the domains' CHECK constraints run when a value is cast
_TYPE_SQL = """
WITH RECURSIVE chain(oid, depth) AS (
    SELECT to_regtype(%s)::oid, 0
    UNION ALL
    SELECT t.typbasetype, c.depth + 1 FROM pg_type t JOIN chain c ON t.oid = c.oid
    WHERE t.typtype = 'd' AND c.depth < %s
)
SELECT DISTINCT 'function ' || p.oid::regprocedure::text, p.provolatile = 'v', p.prosecdef, NULL
FROM chain c JOIN pg_type t ON t.oid = c.oid
JOIN pg_proc p ON p.oid IN (t.typinput, t.typmodin) OR p.oid IN (SELECT castfunc FROM pg_cast WHERE casttarget = c.oid)
WHERE p.provolatile = 'v' OR p.prosecdef
UNION ALL
SELECT 'domain ' || k.contypid::regtype::text, false, false, pg_get_constraintdef(k.oid)
FROM chain c JOIN pg_constraint k ON k.contypid = c.oid AND k.contype = 'c'
"""


def check_on_server(
    conn: psycopg.Connection, condition: Condition, table: str, columns: Mapping[str, str | None]
) -> None:
    """Refuse ``condition`` on ``table`` (:class:`ExpressionError` naming the column or function) unless it reads
    only visible columns and names nothing that can act.

    :param conn: a connection of the role that evaluates the condition (its search path decides which functions
        a name reaches).
    :param columns: every column of the table: ``None`` where a condition may read it, else why it may not.
    """
    for name in sorted(condition.columns):
        if name not in columns:
            raise ExpressionError(
                f"names {name!r}, which is not a column of {table} (a condition reads the snapshotted row's columns; "
                'quote a name that has capitals or other characters, as in "Name")'
            )
        reason = columns[name]
        if reason is not None:
            raise ExpressionError(
                f"reads column {name!r} of {table}, which {reason}; "
                "a condition may read only the columns the events carry as they are"
            )
    _check_names(conn, condition, 0)


def visible_columns(info: CatalogTable, events: TableSchema, rules: ColumnRules) -> dict[str, str | None]:
    """Every column of a table, mapped to ``None`` where its events carry it as it is (in the value or the key), else
    to why a condition may not read it: left out by the column filters (or of a type walflow does not capture), or
    changed by a column rule (masked, hashed, truncated)."""
    visible = {f.index for f in events.fields} | {f.index for f in events.key_fields}
    columns: dict[str, str | None] = {}
    for index, column in enumerate(events.column_names):
        catalog_column = info.columns.get(column)
        if index not in visible or catalog_column is None:
            columns[column] = (
                "the events leave out (column.include.list, column.exclude.list, or a type walflow does not capture)"
            )
            continue
        mapping = rules.mapping(info.schema, info.name, column, catalog_column.type)
        columns[column] = (
            None if mapping is None or mapping.convert is None else f"the events carry changed ({mapping.rule})"
        )
    for column in info.columns:
        columns.setdefault(column, "the events leave out")
    return columns


def _check_names(conn: psycopg.Connection, condition: Condition, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ExpressionError(f"casts to domains nested more than {_MAX_DEPTH} deep")
    for query, names, what in (
        (_FUNCTIONS_SQL, condition.functions, "calls"),
        (_OPERATORS_SQL, condition.operators, "uses the operator"),
    ):
        if not names:
            continue
        schemas, plain = zip(*sorted(names, key=lambda n: (n[0] or "", n[1])))
        for name, volatile, definer in conn.execute(query, (list(schemas), list(plain))).fetchall():
            raise ExpressionError(_refusal(what, name, volatile, definer))
    for type_text in sorted(condition.types):
        for name, volatile, definer, check in conn.execute(_TYPE_SQL, (type_text, _MAX_DEPTH)).fetchall():
            if check is None:
                raise ExpressionError(
                    _refusal(f"casts to {type_text}, which calls", name.removeprefix("function "), volatile, definer)
                )
            # a domain's CHECK runs on every value cast to it: the same rules apply to it (VALUE is not a column)
            text = check.strip()
            inner = text[len("CHECK") :].strip() if text.upper().startswith("CHECK") else text
            inner = inner.removesuffix("NOT VALID").strip()
            try:
                _check_names(conn, analyse_condition(inner, f"the CHECK of {name}"), depth + 1)
            except ExpressionError as exc:
                raise ExpressionError(f"casts to {type_text}, whose CHECK {inner} {exc}") from None


def _refusal(what: str, name: str, volatile: bool, definer: bool) -> str:
    if volatile:
        return (
            f"{what} {name}, which is VOLATILE: a condition may call only functions and operators that cannot act "
            "(IMMUTABLE or STABLE ones, such as lower(), date_trunc() or now())"
        )
    return f"{what} {name}, which is SECURITY DEFINER (it runs with its owner's rights): a condition may not call it"


def check_reader_role(conn: psycopg.Connection, table_oid: int, table: str) -> None:
    """Refuse to evaluate a condition as a role that could do more than read the captured tables: a superuser, a
    role with REPLICATION or BYPASSRLS or a member of one, or one that owns ``table`` (directly or through a group)."""
    row = conn.execute(
        "SELECT current_user, r.rolsuper, r.rolreplication, r.rolbypassrls, "
        "pg_has_role(current_user, c.relowner, 'USAGE'), "
        "EXISTS (SELECT FROM pg_roles p WHERE p.rolname <> current_user "
        "AND (p.rolsuper OR p.rolreplication OR p.rolbypassrls) "
        "        AND pg_has_role(current_user, p.oid, 'MEMBER')) "
        "FROM pg_roles r, pg_class c WHERE r.rolname = current_user AND c.oid = %s",
        (table_oid,),
    ).fetchone()
    if row is None:
        return  # the table is gone: reading it fails with the server's own error
    role, superuser, replication, bypassrls, owner, member = row
    powers = [
        p
        for p, has in (
            ("is a superuser", superuser), ("has REPLICATION", replication), ("has BYPASSRLS", bypassrls),
            (f"owns {table}", owner), ("is a member of a role with one of those", member),
        )
        if has
    ]  # fmt: skip
    if powers:
        raise ExpressionError(
            f"would be evaluated as role {role!r}, which {' and '.join(powers)}: conditions are evaluated as a role "
            "that may only read the captured tables. Point 'walflow.postgres.reader.conn.id' at such a role "
            "(walflow's roles.sql creates one with -v reader=...)"
        )


def describe_error(exc: BaseException) -> str:
    """A server error about a condition for the state table and the log: its message where it can only quote what
    the condition's author wrote, else its SQLSTATE and name alone (``invalid input syntax for type integer`` quotes
    the row's value it failed on)."""
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(exc, psycopg.Error) and sqlstate and sqlstate[:2] not in _TOLD_CLASSES:
        return (
            f"the server raised SQLSTATE {sqlstate} ({type(exc).__name__}) while evaluating it; the message is not "
            "recorded, as it may quote values of the table's rows. Try the condition on the table yourself"
        )
    return first_line(exc)
