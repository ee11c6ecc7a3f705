"""Debezium's reselect post processor (``io.debezium.processors.reselect.ReselectColumnsPostProcessor``): columns
of a change event that pgoutput could not give (a TOASTed value an update left unchanged, which the event would
carry as ``unavailable.value.placeholder``) or that are null are read again from the table, so consumers never see
the placeholder.

As in Debezium: only created and updated rows (a snapshot's rows are read whole), only the columns
``reselect.columns.include.list``/``exclude.list`` select (``<schema>.<table>:<column>`` regular expressions, case
insensitive), the row found by its key's values, and the values read are the row's *current* ones (a later change
of those columns shows early). A row that is gone is warned about (``reselect.error.handling.mode: warn``) or stops
the batch (``fail``). The values are read as their types' text output, the form pgoutput sends, so the table's
converters turn them into the very values a streamed change would carry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql

from walflow.config.connector import ConnectorConfig
from walflow.config.javaregex import CASE_INSENSITIVE, compile_java
from walflow.config.smt_chain import PostProcessorSpec
from walflow.errors import SourceError
from walflow.records.events import TableSchema
from walflow.source.connection import quote_table

log = logging.getLogger(__name__)


class Reselector:
    """One ``ReselectColumnsPostProcessor``, reading through ``connection()`` (an autocommit session)."""

    def __init__(
        self, config: ConnectorConfig, spec: PostProcessorSpec, connection: Callable[[], psycopg.Connection]
    ) -> None:
        settings = spec.settings
        # Java patterns, case-insensitive, as the post processor compiles them (checked when the chain was read)
        self.include = [
            compile_java(p, CASE_INSENSITIVE, "'reselect.columns.include.list'")
            for p in settings["reselect.columns.include.list"]
        ]
        self.exclude = [
            compile_java(p, CASE_INSENSITIVE, "'reselect.columns.exclude.list'")
            for p in settings["reselect.columns.exclude.list"]
        ]
        self.unavailable = bool(settings["reselect.unavailable.values"])
        self.nulls = bool(settings["reselect.null.values"])
        self.fail = settings["reselect.error.handling.mode"] == "fail"
        self.connection = connection
        self.signal_table = config.signal_table
        self._queries: dict[int, tuple[TableSchema, sql.Composed, list[int]]] = {}
        self._selected: dict[tuple[int, str], bool] = {}
        self.reselected = 0

    def _wanted(self, table: TableSchema, name: str) -> bool:
        known = self._selected.get((id(table), name))
        if known is None:
            full = f"{table.data_collection}:{name}"
            if self.include:
                known = any(p.fullmatch(full) for p in self.include)
            else:
                known = not any(p.fullmatch(full) for p in self.exclude)
            self._selected[(id(table), name)] = known
        return known

    def apply(self, table: TableSchema, values: Sequence[Any], after: dict[str, Any]) -> dict[str, Any]:
        """``after`` with its unavailable and null columns read again (the same dict when none is)."""
        if (table.schema, table.table) == self.signal_table or not table.key_columns:
            return after
        needed = [
            name for name, toast in table.toast_values
            if name in after and (
                (self.unavailable and toast is not None and after[name] == toast)
                or (self.nulls and after[name] is None)
            ) and self._wanted(table, name)
        ]  # fmt: skip
        if not needed:
            return after
        query, positions = self._query(table)
        key = [values[i] for i in positions]
        try:
            row = self.connection().execute(query, key).fetchone()
        except psycopg.Error as exc:
            return self._failed(table, key, f"the query failed: {str(exc).strip()}", after)
        if row is None:
            return self._failed(table, key, "no row has that key any more", after)
        fresh = table.row(row)
        self.reselected += 1
        return {**after, **{name: fresh[name] for name in needed}}

    def _failed(self, table: TableSchema, key: Sequence[Any], why: str, after: dict[str, Any]) -> dict[str, Any]:
        message = f"reselect post processor: cannot read table {table.data_collection} again for key {list(key)}: {why}"
        if self.fail:
            raise SourceError(message + "; set reselect.error.handling.mode: warn to emit the event as it is")
        log.warning("%s; the event keeps its values", message)
        return after

    def _query(self, table: TableSchema) -> tuple[sql.Composed, list[int]]:
        """The row's query by key, and where the key's values are in a tuple."""
        cached = self._queries.get(id(table))
        if cached is None:
            columns = sql.SQL(", ").join(
                # format('%s') writes a value with its type's output function, as pgoutput does ('%%': the query has
                # parameters)
                sql.SQL("CASE WHEN {0} IS NULL THEN NULL ELSE format('%%s', {0}) END").format(sql.Identifier(name))
                for name in table.column_names
            )
            where = sql.SQL(" AND ").join(
                sql.SQL("{} = CAST(%s AS {})").format(sql.Identifier(column), sql.SQL(table.column_types[column]))
                if table.column_types.get(column)
                else sql.SQL("{}::text = %s").format(sql.Identifier(column))
                for column in table.key_columns
            )
            query = sql.SQL("SELECT {} FROM {} WHERE {}").format(columns, quote_table(table.schema, table.table), where)
            cached = self._queries[id(table)] = (table, query, [table.column_names.index(c) for c in table.key_columns])
        return cached[1], cached[2]


def reselectors(
    config: ConnectorConfig, connection: Callable[[], psycopg.Connection]
) -> Callable[[TableSchema, Sequence[Any], dict[str, Any]], dict[str, Any]] | None:
    """The connector's post processors as one function of (table, tuple values, after row), or ``None``."""
    chain = [Reselector(config, spec, connection) for spec in config.post_processors]
    if not chain:
        return None

    def apply(table: TableSchema, values: Sequence[Any], after: dict[str, Any]) -> dict[str, Any]:
        for processor in chain:
            after = processor.apply(table, values, after)
        return after

    return apply
