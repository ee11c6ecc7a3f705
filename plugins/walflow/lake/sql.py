"""The SQL the lake job runs, built as text from names (no Spark needed, so each statement can be read and tested).

Every identifier goes through :func:`sql_quote` and every literal through :func:`sql_string`: source names may hold
quotes, backquotes, dots and any letters.
"""

from __future__ import annotations

from walflow.lake import columns as C
from walflow.lake.naming import sql_quote as q
from walflow.lake.naming import sql_string as s

#: Iceberg properties of every lake table: format v2 with merge-on-read deletes and updates (a MERGE writes
#: delete files instead of rewriting data files)
TABLE_PROPERTIES = (
    "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"
)
_EMPTY_OVERFLOW = f"CAST(map() AS {C.OVERFLOW_TYPE})"


def create_table(ident: str, columns: list[tuple[str, str]]) -> str:
    return f"CREATE TABLE {ident} ({', '.join(f'{q(n)} {t}' for n, t in columns)}) USING iceberg TBLPROPERTIES ({TABLE_PROPERTIES})"


def add_column(ident: str, name: str, ddl_type: str) -> str:
    return f"ALTER TABLE {ident} ADD COLUMN {q(name)} {ddl_type}"


def widen_column(ident: str, name: str, ddl_type: str) -> str:
    return f"ALTER TABLE {ident} ALTER COLUMN {q(name)} TYPE {ddl_type}"


def set_property(ident: str, key: str, value: str) -> str:
    return f"ALTER TABLE {ident} SET TBLPROPERTIES ({s(key)} = {s(value)})"


def unset_property(ident: str, key: str) -> str:
    return f"ALTER TABLE {ident} UNSET TBLPROPERTIES ({s(key)})"


def fill_default(ident: str, column: str, literal: str) -> str:
    """Give the rows that existed before a column was added its default (PostgreSQL did, without events)."""
    return f"UPDATE {ident} SET {q(column)} = {literal} WHERE {q(column)} IS NULL"


def _nonempty(expr: str) -> str:
    return f"CASE WHEN size({expr}) > 0 THEN {expr} END"


def kept_overflow(target: str, source: str) -> str:
    """The ``_walflow_overflow`` of a row a MERGE updates: the event's entries, except for the columns whose value
    it did not carry (unchanged TOAST), whose entries stay the row's."""
    toast = f"{source}.{C.TOAST}"
    kept = f"map_filter(coalesce({target}.{C.OVERFLOW}, {_EMPTY_OVERFLOW}), (k, v) -> array_contains({toast}, k))"
    new = f"map_filter(coalesce({source}.{C.OVERFLOW}, {_EMPTY_OVERFLOW}), (k, v) -> NOT array_contains({toast}, k))"
    return f"CASE WHEN size({toast}) = 0 THEN {source}.{C.OVERFLOW} ELSE {_nonempty(f'map_concat({kept}, {new})')} END"


def key_match(keys: list[str], overflowing: list[str]) -> str:
    """The MERGE condition of keyed tables: every key column equal (null-safe), and for key columns whose values
    may have been fitted (``overflowing``) their exact source text too, so that ``infinity`` and 9999-12-31 stay
    two keys."""
    on = [f"t.{q(k)} <=> s.{q(k)}" for k in keys]
    on += [f"element_at(t.{C.OVERFLOW}, {s(k)}) <=> element_at(s.{C.OVERFLOW}, {s(k)})" for k in overflowing]
    return " AND ".join(on)


def merge_keyed(ident: str, view: str, names: list[str], keys: list[str], overflowing: list[str], soft: bool) -> str:
    """One MERGE of the latest event per key. An event older than the row's (by source position) is ignored, so
    that a redelivered or late event never overwrites a newer row; equal positions are the same event again.
    A column whose value the event did not carry (unchanged TOAST) keeps the row's value."""
    insert_cols = [q(n) for n in names] + [*C.EVENT_META, C.APPLIED_AT]
    insert_vals = [f"s.{q(n)}" for n in names] + [f"s.{m}" for m in C.EVENT_META] + ["current_timestamp()"]
    if soft:
        insert_cols.append(C.DELETED)
        insert_vals.append(f"s.{C.OP} IN ('d', 't')")
    newer = f"(t.{C.POSITION} IS NULL OR s.{C.POSITION} >= t.{C.POSITION})"
    sets = [f"t.{q(n)} = CASE WHEN array_contains(s.{C.TOAST}, {s(n)}) THEN t.{q(n)} ELSE s.{q(n)} END" for n in names]
    stamp = [f"t.{m} = s.{m}" for m in (C.OP, C.LSN, C.SOURCE_TS, C.POSITION)] + [f"t.{C.APPLIED_AT} = current_timestamp()"]
    sets += [*stamp, f"t.{C.OVERFLOW} = {kept_overflow('t', 's')}"]
    on = key_match(keys, overflowing)
    insert = f"INSERT ({', '.join(insert_cols)}) VALUES ({', '.join(insert_vals)})"
    if soft:
        deleted = f"WHEN MATCHED AND s.{C.OP} = 'd' AND {newer} THEN UPDATE SET t.{C.DELETED} = true, {', '.join(stamp)}"
        # 't': a row a truncate removed (soft mode writes it flagged, with its last values)
        sets.append(f"t.{C.DELETED} = (s.{C.OP} = 't')")
        not_matched = f"WHEN NOT MATCHED THEN {insert}"
    else:
        deleted = f"WHEN MATCHED AND s.{C.OP} = 'd' AND {newer} THEN DELETE"
        not_matched = f"WHEN NOT MATCHED AND s.{C.OP} <> 'd' THEN {insert}"
    return f"MERGE INTO {ident} t USING {view} s ON {on} {deleted} WHEN MATCHED AND {newer} THEN UPDATE SET {', '.join(sets)} {not_matched}"


def insert_only(ident: str, view: str, names: list[str], soft: bool) -> str:
    """Inserts of a table without key (an append-only history): every event is a new row."""
    cols = [q(n) for n in names] + [*C.EVENT_META, C.APPLIED_AT]
    vals = [f"s.{q(n)}" for n in names] + [f"s.{m}" for m in C.EVENT_META] + ["current_timestamp()"]
    if soft:
        cols.append(C.DELETED)
        vals.append("false")
    return f"INSERT INTO {ident} ({', '.join(cols)}) SELECT {', '.join(vals)} FROM {view} s WHERE s.{C.OP} <> 'd'"


def truncate(ident: str, position: str, lsn: int | None, ts_ms: int | None, soft: bool) -> str:
    """Rows older than the truncate at ``position`` go (hard) or are flagged deleted (soft)."""
    older = f"({C.POSITION} IS NULL OR {C.POSITION} < {s(position)})"
    if not soft:
        return f"DELETE FROM {ident} WHERE {older}"
    return (
        f"UPDATE {ident} SET {C.DELETED} = true, {C.OP} = 't', {C.LSN} = {'NULL' if lsn is None else int(lsn)}, "
        f"{C.SOURCE_TS} = {'NULL' if ts_ms is None else int(ts_ms)}, {C.POSITION} = {s(position)}, {C.APPLIED_AT} = current_timestamp() "
        f"WHERE {older} AND NOT coalesce({C.DELETED}, false)"
    )


CHANGELOG_COLUMNS = (C.OP, C.LSN, C.SOURCE_TS, C.PARTITION, C.OFFSET, C.TOAST, C.POSITION, C.OVERFLOW)


def changelog_insert(ident: str, view: str, names: list[str]) -> str:
    """Every event of ``view`` appended to a changelog table, in source order."""
    cols = ", ".join([q(n) for n in names] + list(CHANGELOG_COLUMNS))
    order = ", ".join(C.ORDER)
    return f"INSERT INTO {ident} ({cols}, {C.APPLIED_AT}) SELECT {cols}, current_timestamp() FROM {view} ORDER BY {order}"


def keyless_merge(ident: str, view: str, names: list[str], soft: bool) -> str:
    """The MERGE of a table without key (see :mod:`walflow.lake.keyless`): rows of kind 'del' remove every copy of
    a row value (values and ``_walflow_overflow`` equal), rows of kind 'ins' are written."""
    on = [f"t.{q(n)} <=> s.{q(n)}" for n in names] + [f"to_json(t.{C.OVERFLOW}) <=> to_json(s.{C.OVERFLOW})"]
    if soft:
        on.append(f"NOT coalesce(t.{C.DELETED}, false)")
    cols = [q(n) for n in names] + [*C.EVENT_META, C.APPLIED_AT]
    vals = [f"s.{q(n)}" for n in names] + [f"s.{m}" for m in C.EVENT_META] + ["current_timestamp()"]
    if soft:
        cols.append(C.DELETED)
        vals.append("s._walflow_is_deleted")
    return (
        f"MERGE INTO {ident} t USING {view} s ON s._walflow_kind = 'del' AND {' AND '.join(on)} WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED AND s._walflow_kind = 'ins' THEN INSERT ({', '.join(cols)}) VALUES ({', '.join(vals)})"
    )
