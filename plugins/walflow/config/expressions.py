"""SQL conditions written by users (an incremental snapshot's ``additional-condition``), and the templates a
snapshot form may use in them.

An ``additional-condition`` is spliced into the snapshot's ``SELECT ... WHERE (<condition>)``, so it must be one SQL
expression and nothing else: not several statements (``1=1); DROP TABLE t; SELECT (1``), and not a way out of the
parentheses into another clause (``true) UNION SELECT ... FROM other_table WHERE (true``). :func:`analyse_condition`
parses it with PostgreSQL's own grammar (libpg_query, through ``pglast``) as the only item of ``SELECT (<text>)``:
text that closes the parentheses early adds a target, a FROM, a set operation or a statement, and is refused. It must
also be an expression over the snapshotted row alone (no subquery, parameter, aggregate, ``*`` or qualified name),
and it says what it names (:class:`Condition`: columns, functions, operators, cast types), which
:mod:`walflow.capture.incremental.conditions` then checks against the server's catalog before the reader role evaluates
it.

Values typed into the snapshot form are data. The only templating a condition gets is :func:`render_condition`:
the template may hold text and the run's interval variables, nothing else (no Connections, Variables, Airflow
internals, expressions or statements), which is what backfills need (``updated_at >= '{{ data_interval_start }}'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
import pglast
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pglast import ast
from pglast.stream import RawStream

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


@dataclass(frozen=True)
class Condition:
    """A checked condition and what it reads and calls, by name, for the server-side check
    (:mod:`walflow.capture.incremental.conditions`): the columns it reads, the functions, operators and types (of
    casts) it names, each name as ``(schema or None, name)``."""

    text: str
    columns: frozenset[str] = frozenset()
    functions: frozenset[tuple[str | None, str]] = frozenset()
    operators: frozenset[tuple[str | None, str]] = frozenset()
    types: frozenset[str] = frozenset()


#: Nodes an expression over one row may hold. Anything else (a subquery, a parameter, an aggregate, a window, a
#: node a later grammar adds) is refused by name: a condition reads the snapshotted row and nothing else.
_EXPRESSION_NODES = frozenset(
    {
        "A_ArrayExpr", "A_Const", "A_Expr", "A_Indices", "A_Indirection", "BitString", "BoolExpr", "Boolean",
        "BooleanTest", "CaseExpr", "CaseWhen", "CoalesceExpr", "CollateClause", "ColumnRef", "Float", "FuncCall",
        "Integer", "JsonArrayConstructor", "JsonFormat", "JsonIsPredicate", "JsonKeyValue", "JsonObjectConstructor",
        "JsonOutput", "JsonReturning", "JsonValueExpr", "MinMaxExpr", "NullTest", "RowExpr", "SQLValueFunction",
        "String", "TypeCast", "TypeName", "XmlExpr", "XmlSerialize",
    }
)  # fmt: skip
#: What a refused node is, for the error message.
_REFUSED_NODES = {
    "SubLink": "a subquery (a condition may read only the snapshotted row)",
    "ParamRef": "a parameter placeholder ($n)",
    "A_Star": "'*' (name the columns)",
    "GroupingFunc": "GROUPING()",
}
#: The operators PostgreSQL applies for the A_Expr kinds whose node names a construct rather than an operator.
#: (keyed by an optional kind, as pglast's A_Expr types it, so that a lookup needs no check first)
_KIND_OPERATORS: dict[pglast.enums.A_Expr_Kind | None, tuple[str, ...]] = {
    pglast.enums.A_Expr_Kind.AEXPR_DISTINCT: ("=",),
    pglast.enums.A_Expr_Kind.AEXPR_NOT_DISTINCT: ("=",),
    pglast.enums.A_Expr_Kind.AEXPR_NULLIF: ("=",),
    pglast.enums.A_Expr_Kind.AEXPR_BETWEEN: (">=", "<="),
    pglast.enums.A_Expr_Kind.AEXPR_BETWEEN_SYM: (">=", "<="),
    pglast.enums.A_Expr_Kind.AEXPR_NOT_BETWEEN: ("<", ">"),
    pglast.enums.A_Expr_Kind.AEXPR_NOT_BETWEEN_SYM: ("<", ">"),
}
#: The alias walflow gives the snapshotted table (``FROM <table> AS walflow_t``): ``walflow_t.col`` is ``col``.
TABLE_ALIAS = "walflow_t"


def check_condition(text: str, what: str = "'additional-condition'") -> str:
    """Return ``text`` stripped if it is exactly one SQL expression over the snapshotted row; else raise
    :class:`ExpressionError`.

    :param what: how to name the value in the error (the signal field or form field it came from).
    """
    return analyse_condition(text, what).text


def analyse_condition(text: str, what: str = "'additional-condition'") -> Condition:
    """Check ``text`` as :func:`check_condition` does and say what it reads and calls (:class:`Condition`)."""
    condition = text.strip()
    if not condition:
        raise ExpressionError(f"{what} is empty")
    if "\x00" in condition:
        raise ExpressionError(f"{what} {condition!r} contains a NUL character")
    # On lines of their own, the parentheses cannot be swallowed by a trailing -- comment.
    try:
        statements = pglast.parse_sql(f"SELECT (\n{condition}\n)")
    except pglast.parser.ParseError as exc:
        raise ExpressionError(
            f"{what} {condition!r} is not valid SQL ({exc}); write one condition, as in a WHERE clause"
        ) from None
    problem = _escape(statements)
    if problem:
        raise ExpressionError(
            f"{what} {condition!r} is not one SQL expression: {problem}. It must be a single condition, as in a "
            "WHERE clause (for example status = 'open' AND id > 100); statements and other clauses are refused"
        )
    select = statements[0].stmt
    assert isinstance(select, ast.SelectStmt) and select.targetList  # what _escape checked
    try:
        return _references(condition, select.targetList[0])
    except ExpressionError as exc:
        raise ExpressionError(f"{what} {condition!r} {exc}") from None


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


def _qualified(names: tuple[Any, ...]) -> tuple[str | None, str]:
    parts = [n.sval for n in names]
    return (parts[-2] if len(parts) > 1 else None), parts[-1]


def _references(condition: str, target: ast.ResTarget) -> Condition:
    """The columns, functions, operators and cast types of a parsed condition; ExpressionError (its text completed
    by the caller) for anything that is not an expression over one row."""
    columns: set[str] = set()
    functions: set[tuple[str | None, str]] = set()
    operators: set[tuple[str | None, str]] = set()
    types: set[str] = set()
    for node in _walk(target.val):
        kind = type(node).__name__
        if kind not in _EXPRESSION_NODES:
            refused = _REFUSED_NODES.get(kind, f"{kind}, which is not part of an expression over one row")
            raise ExpressionError(f"is refused: it contains {refused}")
        if isinstance(node, ast.ColumnRef):
            fields = node.fields or ()
            if any(not isinstance(f, ast.String) for f in fields):
                raise ExpressionError(f"is refused: it contains {_REFUSED_NODES['A_Star']}")
            names = [f.sval for f in fields]
            if len(names) == 2 and names[0] == TABLE_ALIAS:
                names = names[1:]
            if len(names) != 1:
                raise ExpressionError(
                    f"is refused: {'.'.join(names)!r} is not a column of the table (name a column alone, unqualified)"
                )
            columns.add(names[0])
        elif isinstance(node, ast.FuncCall):
            funcname = node.funcname or ()
            if node.over is not None or node.agg_star or node.agg_distinct or node.agg_order or node.agg_filter:
                raise ExpressionError(
                    f"is refused: it calls {'.'.join(n.sval for n in funcname)} as an aggregate or window function"
                )
            functions.add(_qualified(funcname))
        elif isinstance(node, ast.A_Expr):
            schema, name = _qualified(node.name or ())
            for op in _KIND_OPERATORS.get(node.kind, (name,)):
                operators.add((schema, op))
        elif isinstance(node, ast.CaseExpr) and node.arg is not None:
            operators.add((None, "="))  # CASE x WHEN y compares with =
        elif isinstance(node, ast.TypeCast) and node.typeName is not None:
            if node.typeName.pct_type:
                raise ExpressionError("is refused: it names a type with %TYPE")
            types.add(RawStream()(node.typeName))
    return Condition(condition, frozenset(columns), frozenset(functions), frozenset(operators), frozenset(types))


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


#: The longest condition template a form may send, and the longest condition it may render to.
MAX_TEMPLATE_CHARS = 16_384
#: Filters a condition template may apply to a variable: each runs in time linear in the variable's short text.
TEMPLATE_FILTERS = frozenset({"string", "lower", "upper", "trim"})
#: The template nodes a condition may hold: text, variables, constants, and those filters. No calls, attributes,
#: operators (``9**9**9``, ``'x'*10**10``), loops or other statements: rendering is linear in the text's length.
_TEMPLATE_NODES = (
    jinja2.nodes.Template,
    jinja2.nodes.Output,
    jinja2.nodes.TemplateData,
    jinja2.nodes.Name,
    jinja2.nodes.Const,
    jinja2.nodes.Filter,
)


def render_condition(text: str, variables: Mapping[str, Any], what: str = "'additional_condition'") -> str:
    """Render the templates of a user-typed condition with the run's interval variables only.

    The template is parsed first and may hold only text, the variables of :data:`CONDITION_VARIABLES`, constants
    and the filters of :data:`TEMPLATE_FILTERS`: anything else (``conn``, ``var``, ``macros``, attribute tricks,
    arithmetic that would take the worker's CPU or memory, loops) is refused before anything is rendered, with the
    list of what is allowed. Rendering such a template takes time and memory linear in its length, which is bounded
    by :data:`MAX_TEMPLATE_CHARS`.
    """
    if "{" not in text:
        return text
    if len(text) > MAX_TEMPLATE_CHARS:
        raise ExpressionError(f"{what} is {len(text)} characters long; a condition may be at most {MAX_TEMPLATE_CHARS}")
    try:
        tree = _ENV.parse(text)
    except jinja2.TemplateError as exc:
        raise ExpressionError(f"{what} is not a valid template ({exc})") from None
    for variable in tree.find_all(jinja2.nodes.Name):  # first, as it says best what the text was after
        if variable.name not in CONDITION_VARIABLES:
            raise ExpressionError(
                f"{what} uses {variable.name!r}: a condition typed into a form may use only "
                f"{', '.join(CONDITION_VARIABLES)} (the run's interval), never Connections, Variables or other task "
                "context"
            )
    for node in tree.find_all(jinja2.nodes.Node):
        if isinstance(node, jinja2.nodes.Filter) and (
            node.name not in TEMPLATE_FILTERS or node.args or node.kwargs or node.dyn_args or node.dyn_kwargs
        ):
            raise ExpressionError(
                f"{what} applies the filter {node.name!r}: a condition's template may apply only "
                f"{', '.join(sorted(TEMPLATE_FILTERS))}, without arguments"
            )
        if not isinstance(node, _TEMPLATE_NODES):
            raise ExpressionError(
                f"{what} holds a template {type(node).__name__.lower()} ({text[:80]!r}): a condition's template may "
                "hold only {{ variable }} (the run's interval) and text; no expressions, calls, attributes or "
                "statements"
            )
    allowed = {name: variables[name] for name in CONDITION_VARIABLES if name in variables}
    try:
        rendered = _ENV.from_string(tree).render(allowed)
    except jinja2.UndefinedError as exc:
        raise ExpressionError(f"{what} uses {exc.message}, which this run does not define") from None
    except jinja2.TemplateError as exc:
        raise ExpressionError(f"{what} is not a valid template ({exc})") from None
    if len(rendered) > MAX_TEMPLATE_CHARS:
        raise ExpressionError(
            f"{what} renders to {len(rendered)} characters; a condition may be at most {MAX_TEMPLATE_CHARS}"
        )
    return rendered
