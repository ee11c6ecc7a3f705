"""The SQL the lake job runs, built as text from names (no Spark needed, so each statement can be read and tested).

Every identifier goes through :func:`sql_quote` and every literal through :func:`sql_string`: source names may hold
quotes, backquotes, dots and any letters.
"""

from __future__ import annotations

from typing import Any

from walflow.lake import columns as C
from walflow.lake.naming import sql_quote as q
from walflow.lake.naming import sql_string as s

#: Iceberg properties of every lake table: format v2 with merge-on-read deletes and updates (a MERGE writes
#: delete files instead of rewriting data files: measured, a copy-on-write MERGE of 10,000 changes into 20 million
#: rows took ten times as long), and no shuffle of a MERGE's output by data file before writing (the tables are
#: unpartitioned; each task's position deletes are sorted by the writer; a million changes merged 15% sooner)
TABLE_PROPERTIES = (
    "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
    "'write.merge.mode'='merge-on-read', 'write.merge.distribution-mode'='none', "
    "'write.update.distribution-mode'='none', 'write.delete.distribution-mode'='none'"
)
_EMPTY_OVERFLOW = f"CAST(map() AS {C.OVERFLOW_TYPE})"


def create_table(ident: str, columns: list[tuple[str, str]], properties: dict[str, str] | None = None) -> str:
    """CREATE TABLE with :data:`TABLE_PROPERTIES` and ``properties`` (walflow's claim on the table)."""
    extra = "".join(f", {s(k)}={s(v)}" for k, v in (properties or {}).items())
    return (
        f"CREATE TABLE {ident} ({', '.join(f'{q(n)} {t}' for n, t in columns)}) USING iceberg TBLPROPERTIES "
        f"({TABLE_PROPERTIES}{extra})"
    )


def add_column(ident: str, name: str, ddl_type: str) -> str:
    return f"ALTER TABLE {ident} ADD COLUMN {q(name)} {ddl_type}"


def drop_column(ident: str, name: str) -> str:
    return f"ALTER TABLE {ident} DROP COLUMN {q(name)}"


def rename_column(ident: str, old: str, new: str) -> str:
    return f"ALTER TABLE {ident} RENAME COLUMN {q(old)} TO {q(new)}"


def widen_column(ident: str, name: str, ddl_type: str) -> str:
    return f"ALTER TABLE {ident} ALTER COLUMN {q(name)} TYPE {ddl_type}"


def set_property(ident: str, key: str, value: str) -> str:
    return set_properties(ident, {key: value})


def set_properties(ident: str, properties: dict[str, str]) -> str:
    """Set several table properties in one statement, so that they change together (one commit of the table)."""
    pairs = ", ".join(f"{s(key)} = {s(value)}" for key, value in properties.items())
    return f"ALTER TABLE {ident} SET TBLPROPERTIES ({pairs})"


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


def key_match(keys: list[str], overflowing: list[str], null_safe: bool = True) -> str:
    """The MERGE condition of keyed tables: every key column equal, and for key columns whose values may have been
    fitted (``overflowing``) their exact source text too, so that ``infinity`` and 9999-12-31 stay two keys.

    Keys may hold nulls (a unique index on nullable columns, ``message.key.columns``), which ``<=>`` matches. When
    the batch has none (``null_safe`` False), plain ``=`` matches the same rows, and Spark can then join on the
    key columns themselves, as the batch was already partitioned to keep the latest event per key, instead of
    shuffling the batch a second time.
    """
    equal = "<=>" if null_safe else "="
    on = [f"t.{q(k)} {equal} s.{q(k)}" for k in keys]
    on += [f"element_at(t.{C.OVERFLOW}, {s(k)}) <=> element_at(s.{C.OVERFLOW}, {s(k)})" for k in overflowing]
    return " AND ".join(on)


#: The largest batch (in events, an upper bound of its keys) whose keys narrow the MERGE's target by a literal
#: list (see :func:`target_prefilter`). Spark parses the list with the statement: 10,000 keys cost tens of
#: milliseconds, 100,000 about 3 s, 1,000,000 about a minute, while a batch that large costs a full join anyway.
PREFILTER_MAX_KEYS = 50_000
#: key column types whose equal values always have equal ``xxhash64`` values (no -0.0/NaN variants)
_HASHABLE = (
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "string",
    "binary",
    "boolean",
    "date",
    "timestamp",
    "timestamp_ntz",
)
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")


def prefilter_kind(key_types: list[str]) -> str | None:
    """How :func:`target_prefilter` can narrow a target keyed by columns of ``key_types``: ``"values"`` (one
    integral key: a list Iceberg also prunes files with), ``"hash"`` (any key of hashable types), or None."""
    if len(key_types) == 1 and key_types[0] in _INTEGRAL:
        return "values"
    if all(t in _HASHABLE or t.startswith("decimal(") for t in key_types):
        return "hash"
    return None


def key_hash(keys: list[str], types: list[str], alias: str = "") -> str:
    """``xxhash64`` of the key columns, cast to the table's types so that both sides of the MERGE hash alike."""
    prefix = f"{alias}." if alias else ""
    return "xxhash64(" + ", ".join(f"CAST({prefix}{q(k)} AS {t})" for k, t in zip(keys, types)) + ")"


def target_prefilter(keys: list[str], types: list[str], values: list[Any]) -> str:
    """A condition on the MERGE's target alone that every row the batch's keys match satisfies.

    Spark plans a MERGE with insert clauses as an outer join that reads and shuffles the whole target, so its cost
    grows with the table, not the batch. A condition on the target alone in the ON clause is applied right after
    the scan (and pushed into Iceberg's, which skips files whose key range it excludes), so only the rows the
    batch can touch reach the join. ``values`` are the batch's distinct key values (kind ``"values"``) or their
    :func:`key_hash` (kind ``"hash"``: a hash collision only lets an extra row through to the exact condition).
    """
    kind = prefilter_kind(types)
    if kind == "values":
        present = sorted({int(v) for v in values if v is not None})
        parts = [f"t.{q(keys[0])} IN ({', '.join(map(str, present))})"] if present else []
        if any(v is None for v in values):
            parts.append(f"t.{q(keys[0])} IS NULL")  # the MERGE matches null keys with <=>
        return "(" + " OR ".join(parts) + ")" if parts else "false"
    if kind == "hash":
        hashes = sorted({int(v) for v in values})
        return f"{key_hash(keys, types, 't')} IN ({', '.join(map(str, hashes))})" if hashes else "false"
    raise ValueError(f"key types {types} cannot be prefiltered")


def merge_keyed(
    ident: str,
    view: str,
    names: list[str],
    keys: list[str],
    overflowing: list[str],
    soft: bool,
    toast: bool = True,
    prefilter: str = "",
    null_safe: bool = True,
    carried: bool = False,
) -> str:
    """One MERGE of the latest event per key. An event older than the row's (by source position) is ignored, so
    that a redelivered or late event never overwrites a newer row; equal positions are the same event again.

    With ``toast``, a column whose value the event did not carry (unchanged TOAST) keeps the row's value; without
    it (no event of the batch holds a placeholder) every column is the event's, so the statement reads none of the
    target's own columns but the key and the position, and Spark prunes the others from its scan. ``prefilter``
    (:func:`target_prefilter`) narrows the target to the rows the batch's keys can match; ``null_safe`` as in
    :func:`key_match`; ``carried``: the view has ``_walflow_carried`` (soft deletes,
    :func:`walflow.lake.frames.carry_into_deletes`).
    """
    insert_cols = [q(n) for n in names] + [*C.EVENT_META, C.APPLIED_AT]
    insert_vals = [f"s.{q(n)}" for n in names] + [f"s.{m}" for m in C.EVENT_META] + ["current_timestamp()"]
    if soft:
        insert_cols.append(C.DELETED)
        insert_vals.append(f"s.{C.OP} IN ('d', 't')")
    # an event without a position is a lone tombstone's delete: newer than the row it finds (see the decoder)
    newer = f"(t.{C.POSITION} IS NULL OR s.{C.POSITION} IS NULL OR s.{C.POSITION} >= t.{C.POSITION})"
    if toast:
        sets = [
            f"t.{q(n)} = CASE WHEN array_contains(s.{C.TOAST}, {s(n)}) THEN t.{q(n)} ELSE s.{q(n)} END" for n in names
        ]
        overflow = kept_overflow("t", "s")
    else:
        sets = [f"t.{q(n)} = s.{q(n)}" for n in names]
        overflow = f"s.{C.OVERFLOW}"
    # a lone tombstone's delete (no position) leaves the row's own: an older event redelivered later stays older
    stamp = [f"t.{m} = s.{m}" for m in (C.OP, C.LSN, C.SOURCE_TS)] + [
        f"t.{C.POSITION} = coalesce(s.{C.POSITION}, t.{C.POSITION})",
        f"t.{C.APPLIED_AT} = current_timestamp()",
    ]
    sets += [*stamp, f"t.{C.OVERFLOW} = {overflow}"]
    on = key_match(keys, overflowing, null_safe) + (f" AND {prefilter}" if prefilter else "")
    insert = f"INSERT ({', '.join(insert_cols)}) VALUES ({', '.join(insert_vals)})"
    if soft:
        # a delete carrying the values of the event before it in the batch (_walflow_carried) writes them too
        values = (
            [f"t.{q(n)} = CASE WHEN s._walflow_carried THEN s.{q(n)} ELSE t.{q(n)} END" for n in names]
            if carried
            else []
        )
        deleted = (
            f"WHEN MATCHED AND s.{C.OP} = 'd' AND {newer} THEN UPDATE SET t.{C.DELETED} = true, "
            f"{', '.join([*values, *stamp])}"
        )
        # 't': a row a truncate removed (soft mode writes it flagged, with its last values)
        sets.append(f"t.{C.DELETED} = (s.{C.OP} = 't')")
        # a lone tombstone's delete of a row the lake never held has no values to write
        not_matched = f"WHEN NOT MATCHED AND s.{C.POSITION} IS NOT NULL THEN {insert}"
    else:
        deleted = f"WHEN MATCHED AND s.{C.OP} = 'd' AND {newer} THEN DELETE"
        not_matched = f"WHEN NOT MATCHED AND s.{C.OP} <> 'd' THEN {insert}"
    return (
        f"MERGE INTO {ident} t USING {view} s ON {on} {deleted} WHEN MATCHED AND {newer} THEN UPDATE SET "
        f"{', '.join(sets)} {not_matched}"
    )


def delete_by_identity(ident: str, view: str, identity: list[str], soft: bool) -> str:
    """Deletes matched by the replica identity's columns instead of the key (an identity index without the key):
    the row holding the delete's identity values goes, or is flagged, when it is older than the delete."""
    on = " AND ".join(f"t.{q(c)} <=> s.{q(c)}" for c in identity)
    older = f"(t.{C.POSITION} IS NULL OR t.{C.POSITION} < s.{C.POSITION})"
    stamp = [f"t.{m} = s.{m}" for m in (C.OP, C.LSN, C.SOURCE_TS, C.POSITION)] + [
        f"t.{C.APPLIED_AT} = current_timestamp()"
    ]
    action = f"UPDATE SET t.{C.DELETED} = true, {', '.join(stamp)}" if soft else "DELETE"
    return f"MERGE INTO {ident} t USING {view} s ON {on} AND {older} WHEN MATCHED THEN {action}"


def supersede_by_identity(ident: str, view: str, identity: list[str], key: list[str], soft: bool) -> str:
    """Rows that hold an upsert's identity values (a unique identity index without the key) under another key and
    are older than it: the source moved those values to the upsert's key, so they go (hard) or are flagged (soft)."""
    same = " AND ".join(f"t.{q(c)} <=> s.{q(c)}" for c in identity)
    other_key = " AND ".join(f"t.{q(c)} <=> s.{q(c)}" for c in key)
    older = f"(t.{C.POSITION} IS NULL OR t.{C.POSITION} < s.{C.POSITION})"
    stamp = [f"t.{m} = s.{m}" for m in (C.LSN, C.SOURCE_TS, C.POSITION)] + [
        f"t.{C.OP} = 'd'",
        f"t.{C.APPLIED_AT} = current_timestamp()",
    ]
    if soft:
        return (
            f"MERGE INTO {ident} t USING {view} s ON {same} AND NOT ({other_key}) AND {older} AND NOT t.{C.DELETED} "
            f"WHEN MATCHED THEN UPDATE SET t.{C.DELETED} = true, {', '.join(stamp)}"
        )
    return f"MERGE INTO {ident} t USING {view} s ON {same} AND NOT ({other_key}) AND {older} WHEN MATCHED THEN DELETE"


def insert_latest(ident: str, view: str, names: list[str], soft: bool) -> str:
    """The latest event per key written into a table that holds no rows: exactly what :func:`merge_keyed`'s
    insert clause would write, without the join (an initial load of a large table is an append)."""
    cols = [q(n) for n in names] + [*C.EVENT_META, C.APPLIED_AT]
    vals = [f"s.{q(n)}" for n in names] + [f"s.{m}" for m in C.EVENT_META] + ["current_timestamp()"]
    if soft:
        cols.append(C.DELETED)
        vals.append(f"s.{C.OP} IN ('d', 't')")
        # not a lone tombstone's delete (no position): it has no values to write
        return (
            f"INSERT INTO {ident} ({', '.join(cols)}) SELECT {', '.join(vals)} FROM {view} s WHERE s.{C.POSITION} IS "
            "NOT NULL"
        )
    return f"INSERT INTO {ident} ({', '.join(cols)}) SELECT {', '.join(vals)} FROM {view} s WHERE s.{C.OP} <> 'd'"


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
        f"{C.SOURCE_TS} = {'NULL' if ts_ms is None else int(ts_ms)}, {C.POSITION} = {s(position)}, {C.APPLIED_AT} = "
        f"current_timestamp() WHERE {older} AND NOT coalesce({C.DELETED}, false)"
    )


CHANGELOG_COLUMNS = (C.OP, C.LSN, C.SOURCE_TS, C.PARTITION, C.OFFSET, C.TOAST, C.POSITION, C.OVERFLOW)


def changelog_insert(ident: str, view: str, names: list[str]) -> str:
    """Every event of ``view`` appended to a changelog table, in source order."""
    cols = ", ".join([q(n) for n in names] + list(CHANGELOG_COLUMNS))
    order = ", ".join(C.ORDER)
    return (
        f"INSERT INTO {ident} ({cols}, {C.APPLIED_AT}) SELECT {cols}, current_timestamp() FROM {view} ORDER BY {order}"
    )


def keyless_merge(
    ident: str, view: str, names: list[str], soft: bool, history: tuple[tuple[str, str], ...] = ()
) -> str:
    """The MERGE of a table without key (see :mod:`walflow.lake.keyless`): rows of kind 'del' remove every copy of
    a row value (values and ``_walflow_overflow`` equal), rows of kind 'ins' are written. ``history``: (name, type)
    of the table's columns the source dropped, NULL in the rows written."""
    on = [f"t.{q(n)} <=> s.{q(n)}" for n in names] + [f"to_json(t.{C.OVERFLOW}) <=> to_json(s.{C.OVERFLOW})"]
    if soft:
        on.append(f"NOT coalesce(t.{C.DELETED}, false)")
    cols = [q(n) for n in names] + [q(h) for h, _t in history] + [*C.EVENT_META, C.APPLIED_AT]
    vals = (
        [f"s.{q(n)}" for n in names]
        + [f"CAST(NULL AS {ty})" for _h, ty in history]
        + [f"s.{m}" for m in C.EVENT_META]
        + ["current_timestamp()"]
    )
    if soft:
        cols.append(C.DELETED)
        vals.append("s._walflow_is_deleted")
    return (
        f"MERGE INTO {ident} t USING {view} s ON s._walflow_kind = 'del' AND {' AND '.join(on)} WHEN MATCHED THEN "
        f"DELETE WHEN NOT MATCHED AND s._walflow_kind = 'ins' THEN INSERT ({', '.join(cols)}) VALUES "
        f"({', '.join(vals)})"
    )
