"""Connector state kept beside the data: snapshot progress and incremental-snapshot windows.

Debezium keeps such state in Kafka Connect's offsets topic. walflow keeps it in a small table of the source
database (``walflow.state.table``, default ``public.walflow_state``), written in the same database that the
slot reads, so a rerun after any crash finds it whatever happened to the broker. Each connector owns the rows
whose ``connector`` column is its name. The table itself is never captured.
"""

from __future__ import annotations

from typing import Any

import orjson
import psycopg
from psycopg import sql

from walflow.errors import SourceError


class StateStore:
    """Key/value JSON state of one connector in the source database."""

    def __init__(self, conn: psycopg.Connection, connector: str, table: tuple[str, str]) -> None:
        self._conn = conn
        self._connector = connector
        self.table = table
        self._ident = sql.SQL("{}.{}").format(sql.Identifier(table[0]), sql.Identifier(table[1]))

    def ensure(self) -> None:
        """Create the state table if it is missing (setup does this; it needs CREATE on the schema)."""
        try:
            with self._conn.cursor() as cur:
                cur.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} (connector text NOT NULL, key text NOT NULL, value jsonb NOT NULL, "
                        "updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (connector, key))"
                    ).format(self._ident)
                )
        except psycopg.errors.InvalidSchemaName as exc:
            raise SourceError(
                f"cannot create walflow's state table {'.'.join(self.table)}: {exc.diag.message_primary} in the state "
                "database. Create the schema, or point 'walflow.state.table' at one that exists"
            ) from None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise SourceError(
                f"cannot create walflow's state table {'.'.join(self.table)}: {exc.diag.message_primary}. Create it "
                "as its owner (include/sql/roles.sql) or point 'walflow.state.table' at a schema the role may write."
            ) from None

    def exists(self) -> bool:
        with self._conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s) IS NOT NULL", (".".join('"' + p.replace('"', '""') + '"' for p in self.table),))
            row = cur.fetchone()
        return bool(row and row[0])

    def get(self, key: str, default: Any = None) -> Any:
        if not self.exists():
            return default
        with self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT value FROM {} WHERE connector = %s AND key = %s").format(self._ident),
                (self._connector, key),
            )
            row = cur.fetchone()
        return row[0] if row else default

    def prefixed(self, prefix: str) -> dict[str, Any]:
        """Every ``key: value`` of this connector whose key starts with ``prefix``, in one query."""
        if not self.exists():
            return {}
        with self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT key, value FROM {} WHERE connector = %s AND starts_with(key, %s)").format(self._ident),
                (self._connector, prefix),
            )
            return {row[0]: row[1] for row in cur.fetchall()}

    def others(self, key: str) -> list[tuple[str, Any]]:
        """``(connector, value)`` of every *other* connector in this table that has ``key`` (claims, for instance)."""
        if not self.exists():
            return []
        with self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT connector, value FROM {} WHERE key = %s AND connector <> %s ORDER BY connector").format(self._ident),
                (key, self._connector),
            )
            return [(row[0], row[1]) for row in cur.fetchall()]

    def find(self, prefix: str, status: str, limit: int, after: tuple[str, str] = ("", "")) -> list[tuple[str, Any]]:
        """Up to ``limit`` ``(key, value)`` of this connector whose key starts with ``prefix`` and whose value's
        ``status`` is ``status``, in the order of their values' ``order`` field (then key), after ``after`` (an
        ``(order, key)`` pair: pass the last one returned to read the next page)."""
        if not self.exists():
            return []
        with self._conn.cursor() as cur:
            cur.execute(
                sql.SQL(
                    "SELECT key, value FROM {} WHERE connector = %s AND starts_with(key, %s) AND value->>'status' = %s "
                    "AND (coalesce(value->>'order', '') COLLATE \"C\", key COLLATE \"C\") > (%s COLLATE \"C\", %s COLLATE \"C\") "
                    "ORDER BY coalesce(value->>'order', '') COLLATE \"C\", key COLLATE \"C\" LIMIT %s"
                ).format(self._ident),
                (self._connector, prefix, status, after[0], after[1], limit),
            )
            return [(row[0], row[1]) for row in cur.fetchall()]

    def put(self, key: str, value: Any) -> None:
        with self._conn.cursor() as cur:
            cur.execute(
                sql.SQL(
                    "INSERT INTO {} (connector, key, value, updated_at) VALUES (%s, %s, %s::jsonb, now()) "
                    "ON CONFLICT (connector, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()"
                ).format(self._ident),
                (self._connector, key, orjson.dumps(value).decode()),
            )

    def delete(self, key: str) -> None:
        if not self.exists():
            return
        with self._conn.cursor() as cur:
            cur.execute(sql.SQL("DELETE FROM {} WHERE connector = %s AND key = %s").format(self._ident), (self._connector, key))
