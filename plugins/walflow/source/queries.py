"""SQL that walflow composes from names it does not choose (tables, columns, types), executed with psycopg.

psycopg reads every ``%`` of a query that comes with parameters as the start of a placeholder, names inside
double quotes included: a column named ``v%d`` made a snapshot's keyset query fail with ``only '%s', '%b', '%t'
are allowed as placeholders, got '%d'``. PostgreSQL allows any character but NUL in a name, so a name is data and
must never be read as query syntax.

:class:`Cursor` (and :class:`ServerCursor`, for named cursors) render a composed query themselves when it comes
with parameters: the parts written as SQL (``sql.SQL``, which carry the real placeholders, and user fragments
that :func:`walflow.capture.snapshot_tables.sql_fragment` already escaped) are kept, and every ``%`` of the parts that
are data (``sql.Identifier``, ``sql.Literal``) is doubled, which psycopg turns back into one ``%``. A query without
parameters is sent as written, as psycopg does. :func:`walflow.source.connection.connect` opens every connection with
them; code that renders a query once and reuses the bytes calls :func:`render` for the same result.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.abc import AdaptContext, Params, Query, QueryNoTemplate, Template


def _escaped(part: sql.Composable, context: AdaptContext) -> bytes:
    if isinstance(part, sql.Composed):
        return b"".join(_escaped(p, context) for p in part)  # a Composed iterates over its parts
    text = part.as_bytes(context)
    if isinstance(part, (sql.SQL, sql.Placeholder)):
        return text
    return text.replace(b"%", b"%%")


def render(query: sql.Composable, context: AdaptContext) -> bytes:
    """``query`` as bytes for execution with a parameter list (possibly empty): every ``%`` inside a name or a
    literal doubled, the placeholders of its SQL parts kept."""
    return _escaped(query, context)


def _prepared(query: QueryNoTemplate, params: Params | None, context: AdaptContext) -> QueryNoTemplate:
    if params is None or not isinstance(query, sql.Composable):
        return query
    return render(query, context)


def _template(query: Template, params: Params | None) -> Template:
    """A template (a t-string) is rendered by psycopg, which refuses parameters with it: so here too."""
    if params is not None:
        raise TypeError("'execute()' with string template query doesn't support parameters")
    return query


class Cursor(psycopg.Cursor[Any]):
    """A client-side cursor whose composed queries keep names with ``%`` intact (see the module's docstring)."""

    def execute(self, query: Query, params: Params | None = None, **kwargs: Any) -> Cursor:
        if isinstance(query, Template):
            return super().execute(_template(query, params), **kwargs)
        return super().execute(_prepared(query, params, self), params, **kwargs)

    def executemany(self, query: Query, params_seq: Any, **kwargs: Any) -> None:
        super().executemany(query if isinstance(query, Template) else _prepared(query, (), self), params_seq, **kwargs)


class ServerCursor(psycopg.ServerCursor[Any]):
    """A named (server-side) cursor with the same rendering as :class:`Cursor`."""

    def execute(self, query: Query, params: Params | None = None, **kwargs: Any) -> ServerCursor:
        if isinstance(query, Template):
            return super().execute(_template(query, params), **kwargs)
        return super().execute(_prepared(query, params, self), params, **kwargs)


class AsyncCursor(psycopg.AsyncCursor[Any]):
    """The asynchronous connections' cursor (the deferrable sensors' trigger), with the same rendering."""

    async def execute(self, query: Query, params: Params | None = None, **kwargs: Any) -> AsyncCursor:
        if isinstance(query, Template):
            return await super().execute(_template(query, params), **kwargs)
        return await super().execute(_prepared(query, params, self), params, **kwargs)


def use_cursors(conn: psycopg.Connection) -> psycopg.Connection:
    """Give ``conn`` these cursors (client-side and named); returns it."""
    conn.cursor_factory = Cursor
    conn.server_cursor_factory = ServerCursor
    return conn
