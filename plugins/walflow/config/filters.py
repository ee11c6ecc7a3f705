"""Debezium's include and exclude lists of schemas, tables and columns, and ``message.key.columns``: which tables a
connector captures, which of their columns its events carry, and which columns make a table's message key.
"""

from __future__ import annotations

from walflow.config.connector import ConnectorConfig
from walflow.config.patterns import Pattern, compile_patterns, matches_any
from walflow.errors import ConfigError


class Filters:
    """Debezium's include/exclude lists (anchored, case-insensitive regular expressions)."""

    def __init__(self, config: ConnectorConfig) -> None:
        self._schema_inc = compile_patterns(config.schema_include_list, "'schema.include.list'")
        self._schema_exc = compile_patterns(config.schema_exclude_list, "'schema.exclude.list'")
        self._table_inc = compile_patterns(config.table_include_list, "'table.include.list'")
        self._table_exc = compile_patterns(config.table_exclude_list, "'table.exclude.list'")
        self._col_inc = compile_patterns(config.column_include_list, "'column.include.list'")
        self._col_exc = compile_patterns(config.column_exclude_list, "'column.exclude.list'")
        self._key_columns = _parse_message_key_columns(config.message_key_columns)
        # walflow's own tables are read, never captured
        self._internal = {config.state_table}
        if config.signal_table:
            self._internal.add(config.signal_table)

    def table_included(self, schema: str, table: str) -> bool:
        if schema in ("pg_catalog", "information_schema") or schema.startswith(("pg_toast", "pg_temp")):
            return False
        if table.lower() == "spatial_ref_sys":
            return False  # PostGIS's catalog table, in the user's schema: a system table to Debezium
        if (schema, table) in self._internal:
            return False
        if self._schema_inc and not matches_any(self._schema_inc, schema):
            return False
        if self._schema_exc and matches_any(self._schema_exc, schema):
            return False
        full = f"{schema}.{table}"
        if self._table_inc and not matches_any(self._table_inc, full):
            return False
        return not (self._table_exc and matches_any(self._table_exc, full))

    def column_included(self, schema: str, table: str, column: str) -> bool:
        full = f"{schema}.{table}.{column}"
        if self._col_inc:
            return matches_any(self._col_inc, full)
        if self._col_exc:
            return not matches_any(self._col_exc, full)
        return True

    def message_key_columns(self, schema: str, table: str) -> list[str] | None:
        full = f"{schema}.{table}"
        for pattern, columns in self._key_columns:
            if pattern.fullmatch(full):
                return columns
        return None


def _parse_message_key_columns(value: str | None) -> list[tuple[Pattern, list[str]]]:
    if not value:
        return []
    result = []
    for part in value.split(";"):
        part = part.strip()
        if not part:
            continue
        table, sep, columns = part.rpartition(":")
        if not sep or not table or not columns.strip():
            raise ConfigError(
                f"'message.key.columns' entry {part!r} must look like '<schema>.<table>:<column>[,<column>]'"
            )
        pattern = Pattern(table.strip(), "'message.key.columns' table pattern")
        result.append((pattern, [c.strip() for c in columns.split(",") if c.strip()]))
    return result
