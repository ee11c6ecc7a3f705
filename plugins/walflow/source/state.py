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

import walflow
from walflow.errors import SourceError, StateFormatError

#: the layout of walflow's state rows, raised by a release that changes what a key holds, so that an older walflow
#: (a component not yet upgraded) never reads or overwrites state a newer one wrote
STATE_FORMAT = 1
#: the key recording the format and the walflow version that last wrote the connector's state
FORMAT_KEY = "state_format"


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
                        "CREATE TABLE IF NOT EXISTS {} (connector text NOT NULL, key text NOT NULL, value jsonb NOT "
                        "NULL, updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (connector, key))"
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
                "as its owner (walflow's roles.sql) or point 'walflow.state.table' at a schema the role may write."
            ) from None

    def check_format(self, write: bool = True) -> None:
        """Refuse state written in a newer format than this walflow's (:data:`STATE_FORMAT`); with ``write``, record
        this walflow's format and version when they differ from what is recorded (setup and every stream batch
        call it, so the record says which walflow last ran the connector).

        :raises StateFormatError: naming both versions and the fix, before anything is read or changed.
        """
        recorded = self.get(FORMAT_KEY)
        if isinstance(recorded, dict) and int(recorded.get("format", 0)) > STATE_FORMAT:
            raise StateFormatError(
                f"connector {self._connector!r}: its state in {'.'.join(self.table)} was written by walflow "
                f"{recorded.get('walflow')} (state format {recorded.get('format')}); this is walflow "
                f"{walflow.__version__} (format {STATE_FORMAT}), which would misread it. An Airflow component runs an "
                "older walflow than the others: install the same walflow on the scheduler, DAG processor, triggerer "
                "and every worker (docs/deploy.md, 'Upgrading walflow')"
            )
        current = {"format": STATE_FORMAT, "walflow": walflow.__version__}
        # a recorded format means the table exists (get() asked already); only a first record must ask again
        if write and recorded != current and (recorded is not None or self.exists()):
            self.put(FORMAT_KEY, current)

    def exists(self) -> bool:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT to_regclass(%s) IS NOT NULL", (".".join('"' + p.replace('"', '""') + '"' for p in self.table),)
            )
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
                sql.SQL("SELECT connector, value FROM {} WHERE key = %s AND connector <> %s ORDER BY connector").format(
                    self._ident
                ),
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
                    "AND (coalesce(value->>'order', '') COLLATE \"C\", key COLLATE \"C\") "
                    '> (%s COLLATE "C", %s COLLATE "C") '
                    "ORDER BY coalesce(value->>'order', '') COLLATE \"C\", key COLLATE \"C\" LIMIT %s"
                ).format(self._ident),
                (self._connector, prefix, status, after[0], after[1], limit),
            )
            return [(row[0], row[1]) for row in cur.fetchall()]

    def put(self, key: str, value: Any) -> None:
        self.put_many({key: value})

    def put_many(self, values: dict[str, Any]) -> None:
        """Write every ``key: value`` in one statement (so in one transaction, even on an autocommit connection)."""
        if not values:
            return
        rows = sql.SQL(", ").join(sql.SQL("(%s, %s, %s::jsonb, now())") for _ in values)
        params: list[Any] = []
        for key, value in values.items():
            params += [self._connector, key, orjson.dumps(value).decode()]
        with self._conn.cursor() as cur:
            cur.execute(
                sql.SQL(
                    "INSERT INTO {} (connector, key, value, updated_at) VALUES {} "
                    "ON CONFLICT (connector, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()"
                ).format(self._ident, rows),
                params,
            )

    def delete_prefixed(self, prefix: str, keep: set[str]) -> None:
        """Delete this connector's keys that start with ``prefix``, except those in ``keep``."""
        with self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE connector = %s AND starts_with(key, %s) AND NOT key = ANY(%s)").format(
                    self._ident
                ),
                (self._connector, prefix, sorted(keep)),
            )

    def delete(self, key: str) -> None:
        if not self.exists():
            return
        with self._conn.cursor() as cur:
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE connector = %s AND key = %s").format(self._ident), (self._connector, key)
            )
