"""The torture run (tests/torture/model.py): ``WALFLOW_TORTURE_SEEDS`` (comma-separated, default ``1``) and
``WALFLOW_TORTURE_ROUNDS`` (default 2; ``make test-torture`` runs 200 on three seeds). Each seed prints one JSON
line of its outcome, and the statements of a round that does not end EQUAL."""

from __future__ import annotations

import os
import sys
from typing import Any

import orjson
import pytest

from tests.torture.model import Torture

SEEDS = [int(s) for s in os.environ.get("WALFLOW_TORTURE_SEEDS", "1").split(",") if s.strip()]
ROUNDS = int(os.environ.get("WALFLOW_TORTURE_ROUNDS", "2"))

#: in make test's lane alone, whose Spark session it shares with the fault suite's disruptive tests (Makefile)
pytestmark = [pytest.mark.timeout(max(900, ROUNDS * 60)), pytest.mark.spark, pytest.mark.alone, pytest.mark.long]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_lake_equals_the_source_after_every_round(
    spark: Any, database: str, seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    def progress(line: str) -> None:
        # past pytest's capture (capsys holds sys.stdout): each round is seen as it ends, in the terminal or a log
        sys.__stdout__.write(line + "\n")
        sys.__stdout__.flush()

    outcome = Torture(seed, spark, database, log=progress).run(ROUNDS)
    with capsys.disabled():
        print(
            "WALFLOW_TORTURE " + orjson.dumps({k: v for k, v in outcome.items() if k != "statements"}).decode(),
            flush=True,
        )
        if outcome["result"] != "EQUAL":
            print(f"seed {seed}, round {outcome['round']}: {outcome['result']}; its statements:", flush=True)
            for statement in outcome["statements"]:
                print(f"  {statement};", flush=True)
    # a refusal that names its fix was fixed and counted (Torture.fix); one that names none, or that the fix does not
    # get past, ends the run as REFUSED
    if outcome["result"] == "REFUSED":
        pytest.fail(f"seed {seed}: refused at round {outcome['round']} without a fix that works: {outcome['error']}")
    assert outcome["result"] == "EQUAL", f"seed {seed}: DIVERGED at round {outcome['round']}: {outcome['differences']}"
