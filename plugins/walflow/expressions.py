"""SQL conditions written by users (an incremental snapshot's ``additional-condition``), and the templates a
snapshot form may use in them.

An ``additional-condition`` is spliced into the snapshot's ``SELECT ... WHERE (<condition>)``, so it must be one SQL
expression and nothing else: not several statements (``1=1); DROP TABLE t; SELECT (1``), and not a way out of the
parentheses into another clause (``true) UNION SELECT ... FROM other_table WHERE (true``). :func:`check_condition`
parses it with PostgreSQL's own grammar (libpg_query, through ``pglast``) as the only item of ``SELECT (<text>)``:
text that closes the parentheses early adds a target, a FROM, a set operation or a statement, and is refused. The
stream task then also runs every snapshot query with the extended protocol (which refuses several statements) in a
READ ONLY transaction under a statement timeout, so even an expression that calls a function cannot change data
or run forever.

Values typed into the snapshot form are data. The only templating a condition gets is :func:`render_condition`:
a sandboxed Jinja environment that knows the run's data interval and nothing else (no Connections, Variables or
Airflow internals), which is what backfills need (``updated_at >= '{{ data_interval_start }}'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jinja2
import pglast
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pglast import ast

from walflow.errors import ExpressionError

#: Clauses of a SELECT that a bare ``SELECT (<expression>)`` leaves empty: any of them set means the text escaped.
_SELECT_CLAUSES = (
    "distinctClause",
    "intoClause",
    "fromClause",
    "whereClause",
    "groupClause",
    "havingClause",
    "windowClause",
    "valuesLists",
    "sortClause",
    "limitOffset",
    "limitCount",
    "lockingClause",
    "withClause",
)
#: Statements that change data; none may appear anywhere inside a condition (PostgreSQL refuses them in
#: subqueries too, but the check should not depend on it).
_WRITES = (ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt, ast.MergeStmt)

#: Variables a condition typed into a form (or a backfill's ``--dag-run-conf``) may use: the run's interval.
CONDITION_VARIABLES = (
    "data_interval_start",
    "data_interval_end",
    "logical_date",
    "ds",
    "ds_nodash",
    "ts",
    "ts_nodash",
)

_ENV = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)


def check_condition(text: str, what: str = "'additional-condition'") -> str:
    """Return ``text`` stripped if it is exactly one SQL expression; else raise :class:`ExpressionError`.

    :param what: how to name the value in the error (the signal field or form field it came from).
    """
    condition = text.strip()
    if not condition:
        raise ExpressionError(f"{what} is empty")
    if "\x00" in condition:
        raise ExpressionError(f"{what} {condition!r} contains a NUL character")
    # On lines of their own, the parentheses cannot be swallowed by a trailing -- comment.
    try:
        statements = pglast.parse_sql(f"SELECT (\n{condition}\n)")
    except pglast.parser.ParseError as exc:
        raise ExpressionError(f"{what} {condition!r} is not valid SQL ({exc}); write one condition, as in a WHERE clause") from None
    problem = _escape(statements)
    if problem:
        raise ExpressionError(
            f"{what} {condition!r} is not one SQL expression: {problem}. It must be a single condition, as in a "
            "WHERE clause (for example status = 'open' AND id > 100); statements and other clauses are refused"
        )
    return condition


def _escape(statements: tuple[ast.RawStmt, ...]) -> str | None:
    """What makes the parse of ``SELECT (<text>)`` more than one expression, or ``None``."""
    if len(statements) != 1:
        return f"it holds {len(statements)} statements"
    select = statements[0].stmt
    if not isinstance(select, ast.SelectStmt) or select.op != pglast.enums.SetOperation.SETOP_NONE:
        return "it combines queries (UNION, INTERSECT or EXCEPT)"
    if select.targetList is None or len(select.targetList) != 1:
        return "it closes the parentheses and adds more output columns"
    clauses = [name for name in _SELECT_CLAUSES if getattr(select, name, None)]
    if clauses:
        return f"it closes the parentheses and adds a clause ({', '.join(clauses)})"
    for node in _walk(select.targetList[0]):
        if isinstance(node, _WRITES):
            return f"it contains a data-modifying statement ({type(node).__name__})"
    return None


def _walk(node: Any) -> Any:
    """Every AST node under ``node`` (pglast nodes, tuples of them)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(item)
        elif isinstance(item, ast.Node):
            yield item
            stack.extend(getattr(item, name) for name in item)  # iterating a node gives its attribute names


def render_condition(text: str, variables: Mapping[str, Any], what: str = "'additional_condition'") -> str:
    """Render the templates of a user-typed condition with the run's interval variables only.

    Anything else (``conn``, ``var``, ``macros``, attribute tricks) is undefined in the sandbox and fails with the
    list of what is allowed; nothing outside :data:`CONDITION_VARIABLES` is ever looked up.
    """
    if "{" not in text:
        return text
    allowed = {name: variables[name] for name in CONDITION_VARIABLES if name in variables}
    try:
        return _ENV.from_string(text).render(allowed)
    except jinja2.UndefinedError as exc:
        raise ExpressionError(
            f"{what} uses {exc.message}: a condition typed into a form may use only {', '.join(CONDITION_VARIABLES)} "
            "(the run's interval), never Connections, Variables or other task context"
        ) from None
    except jinja2.exceptions.SecurityError as exc:
        raise ExpressionError(f"{what} tries something the template sandbox forbids ({exc})") from None
    except jinja2.TemplateError as exc:
        raise ExpressionError(f"{what} is not a valid template ({exc})") from None
