"""walflow.source.queries: names are data. A '%' in a composed name or literal is never read as a placeholder, while the
SQL parts keep theirs (rendering only: the integration and type tests run such names through PostgreSQL)."""

from __future__ import annotations

from psycopg import sql
from psycopg.adapt import Transformer

from walflow.source.queries import render


def test_names_and_literals_keep_their_percent_signs_and_placeholders_stay() -> None:
    query = sql.SQL("SELECT {} FROM {} WHERE {} > %s AND t = {}").format(
        sql.Identifier("v%d"), sql.Identifier("s%s", "t{0}"), sql.Identifier("k%"), sql.Literal("50%")
    )
    text = render(query, Transformer()).decode()
    assert text == 'SELECT "v%%d" FROM "s%%s"."t{0}" WHERE "k%%" > %s AND t = \'50%%\''
