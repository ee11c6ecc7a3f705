"""walflow.config.expressions: what a condition may be (one expression over the row) and what a form's template may hold
(text and the run's interval), refused before anything runs or is rendered."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from walflow.config.expressions import analyse_condition, render_condition
from walflow.errors import ExpressionError

RUN = {"data_interval_start": dt.datetime(2024, 3, 1), "data_interval_end": dt.datetime(2024, 3, 2), "ds": "2024-03-01"}


def test_a_condition_lists_the_columns_functions_operators_and_casts_it_names() -> None:
    parsed = analyse_condition(
        "walflow_t.a LIKE 'x%' AND b BETWEEN 1 AND 2 AND c IN (1, 2) AND pg_catalog.lower(d) = 'x' "
        "AND CAST(e AS numeric(10, 2)) > 0 AND CASE f WHEN 1 THEN true END AND g IS DISTINCT FROM 3"
    )
    assert parsed.columns == {"a", "b", "c", "d", "e", "f", "g"}
    assert parsed.functions == {("pg_catalog", "lower")}
    assert {op for _, op in parsed.operators} == {"~~", ">=", "<=", "=", ">"}
    assert parsed.types == {"numeric(10, 2)"}


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("id IN (SELECT id FROM other)", "a subquery"),
        ("EXISTS (SELECT 1)", "a subquery"),
        ("id = $1", "a parameter placeholder"),
        ("walflow_t.* IS NULL", "'*'"),
        ("count(*) > 1", "as an aggregate or window function"),
        ("sum(id) OVER () > 1", "as an aggregate or window function"),
        ("other.id = 1", "'other.id' is not a column of the table"),
        ("1=1); DROP TABLE t; SELECT (1", "not one SQL expression"),
        ("true) UNION SELECT 1 WHERE (true", "not one SQL expression"),
    ],
)
def test_a_condition_reads_the_snapshotted_row_and_nothing_else(text: str, refused: str) -> None:
    with pytest.raises(ExpressionError, match=refused.replace("(", r"\(").replace("*", r"\*").replace("$", r"\$")):
        analyse_condition(text)


def test_a_form_renders_only_text_and_the_runs_interval() -> None:
    assert render_condition("updated_at >= '{{ data_interval_start }}' AND d = '{{ ds | upper }}'", RUN) == (
        "updated_at >= '2024-03-01 00:00:00' AND d = '2024-03-01'"
    )
    assert render_condition("no template here", RUN) == "no template here"


@pytest.mark.parametrize(
    ("template", "refused"),
    [
        ("{{ conn.pg.password }}", "may use only data_interval_start"),
        ("{{ var.value.x }}", "may use only data_interval_start"),
        ("{{ 9**9**9 }}", "holds a template pow"),
        ("{{ 'x'*10**10 }}", "holds a template mul"),
        ("{{ ds.__class__ }}", "holds a template getattr"),
        ("{{ ds|center(1000000000) }}", "applies the filter 'center'"),
        ("{{ ds|replace('-', 'x') }}", "applies the filter 'replace'"),
        ("{% for i in range(10**9) %}x{% endfor %}", "may use only data_interval_start"),
        ("{% set x = 1 %}", "uses 'x'"),
        ("{{ lipsum() }}", "may use only data_interval_start"),
    ],
)
def test_a_template_that_could_act_or_take_the_worker_is_refused_before_rendering(template: str, refused: str) -> None:
    started = time.monotonic()
    with pytest.raises(ExpressionError, match=refused):
        render_condition(f"x = '{template}'", RUN)
    assert time.monotonic() - started < 1


def test_a_template_is_bounded_in_length() -> None:
    with pytest.raises(ExpressionError, match="characters long"):
        render_condition("{{ ds }}" + "x" * 20_000, RUN)
