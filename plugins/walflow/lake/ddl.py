"""Creating lake tables and evolving them with the source: new columns (with their defaults), in-place widenings,
missing metadata columns. Anything else stops the job before it commits."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import _parse_datatype_string

from walflow.errors import LakeError, LakeSchemaError
from walflow.lake import columns as C
from walflow.lake import sql
from walflow.lake.history import commit, table_exists, table_properties
from walflow.lake.types import check_evolution, sql_literal

log = logging.getLogger("walflow.apply")


def simple_type(ddl_type: str) -> str:
    """Spark's simple string of a DDL type (``timestamp_ntz``, ``decimal(10,2)``...), as the catalog reports it."""
    return _parse_datatype_string(ddl_type).simpleString()


def ensure_table(
    spark: SparkSession,
    ident: str,
    namespace: str,
    names: list[str],
    types: dict[str, str],
    defaults: dict[str, Any],
    meta: tuple[tuple[str, str], ...],
    owner: dict[str, str] | None = None,
) -> dict[str, str]:
    """Create the table, or bring it to the events' schema: add columns, widen types, add missing metadata
    columns. Returns the table's properties. ``owner`` (:func:`walflow.lake.claims.claim`) is recorded in the
    table's properties, also on a table an earlier walflow created without it.

    A column added with a default is recorded as pending in a table property before it is added, and filled in
    the table's existing rows afterwards (:func:`fill_pending`), so a crash between the steps is finished by the
    next run.
    """
    if not table_exists(spark, ident):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        spark.sql(sql.create_table(ident, [*((n, types[n]) for n in names), *meta], owner))
        return dict(owner or {})
    existing = {f.name: f.dataType.simpleString() for f in spark.table(ident).schema.fields}
    wanted = {n: simple_type(types[n]) for n in names}
    add, widen, problems = check_evolution(existing, wanted)
    if problems:
        raise LakeSchemaError(
            f"lake table {ident} cannot take the source's new schema: {'; '.join(problems)}. walflow adds columns and "
            "widens int→bigint, float→double and a decimal's precision (same scale), the changes Iceberg makes in "
            "place; any other type change (a narrowing, or e.g. int→text) needs the lake table rebuilt: drop it (or "
            "set walflow.lake.namespace to a new namespace) and re-snapshot the source table."
        )
    # every literal before the first change, so that a default the lake cannot write changes nothing
    literals: dict[str, str] = {}
    for name in add:
        if name in defaults:
            try:
                literals[name] = sql_literal(defaults[name], types[name])
            except LakeError as exc:
                raise LakeSchemaError(
                    f"lake table {ident}: the new column {name} has a default the lake cannot write into the table's "
                    f"existing rows ({exc}); nothing was changed. Rebuild the lake table from a new snapshot: "
                    "`walflow reset <connector> --lake`, then run the connector's setup DAG."
                ) from None
    for name, new_type in widen.items():
        log.info("%s: widening column %s from %s to %s", ident, name, existing[name], new_type)
        spark.sql(sql.widen_column(ident, name, new_type))
    for name, meta_type in meta:
        if name not in existing:
            spark.sql(sql.add_column(ident, name, meta_type))
    for name in add:
        if name in literals:
            # PostgreSQL gave every existing row the default without a change event: so must the lake.
            spark.sql(sql.set_property(ident, C.PENDING_DEFAULT + name, literals[name]))
        spark.sql(sql.add_column(ident, name, types[name]))
    properties = table_properties(spark, ident)
    for key, value in (owner or {}).items():
        if properties.get(key) != value:
            spark.sql(sql.set_property(ident, key, value))
            properties[key] = value
    return properties


def fill_pending(spark: SparkSession, target: str, properties: dict[str, str]) -> list[str]:
    """Give the existing rows the defaults of the columns :func:`ensure_table` recorded as pending, writing to
    ``target`` (the run's branch of the table, :mod:`walflow.lake.fence`). Returns the properties to clear with
    :func:`clear_pending` once those writes are published: until then a crash or a lost publish leaves them
    pending, and the next run fills again."""
    filled = []
    for key, literal in properties.items():
        if key.startswith(C.PENDING_DEFAULT):
            commit(spark, sql.fill_default(target, key[len(C.PENDING_DEFAULT) :], literal), {}, "default")
            filled.append(key)
    return filled


def clear_pending(spark: SparkSession, ident: str, keys: list[str]) -> None:
    for key in keys:
        spark.sql(sql.unset_property(ident, key))
