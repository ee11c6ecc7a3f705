"""`make test` runs in a runtime of its own: nothing it does shows in the runtime of `make demo` and the user's
`airflow standalone` (their DAG list, runs, assets, broker topics)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO_STATE = ROOT / ".walflow"


def repository_dag_ids() -> set[str]:
    """The DAG ids the repository's dags folder defines with its own connectors."""
    from airflow.dag_processing.dagbag import DagBag

    saved = os.environ.pop("WALFLOW_CONNECTORS_DIR", None)
    try:
        return set(DagBag(dag_folder=str(ROOT / "dags")).dag_ids)
    finally:
        if saved is not None:
            os.environ["WALFLOW_CONNECTORS_DIR"] = saved


def test_the_tests_runtime_is_not_the_demos() -> None:
    state = Path(os.environ["WALFLOW_STATE_DIR"]).resolve()
    assert state != DEMO_STATE.resolve(), "run the tests through `make test`, which gives them a runtime of their own"
    assert Path(os.environ["AIRFLOW_HOME"]).resolve().is_relative_to(state)
    assert Path(os.environ["WALFLOW_WAREHOUSE"]).resolve().is_relative_to(state)
    demo_env = DEMO_STATE / "env.sh"
    if demo_env.exists():  # the demo's runtime is up too: another cluster and broker
        exported = dict(
            line.removeprefix("export ").split("=", 1)
            for line in demo_env.read_text().splitlines()
            if line.startswith("export ")
        )
        assert exported["WALFLOW_PG_PORT"].strip("'") != os.environ["WALFLOW_PG_PORT"]
        assert exported["WALFLOW_KAFKA_BOOTSTRAP"].strip("'") != os.environ["WALFLOW_KAFKA_BOOTSTRAP"]


def test_the_demo_runtime_lists_only_the_repositorys_dags() -> None:
    database = DEMO_STATE / "airflow" / "airflow.db"
    if not database.exists():
        pytest.skip("no demo runtime on this machine (`make demo` makes one): nothing the tests could have left there")
    with sqlite3.connect(database) as conn:
        listed = {row[0] for row in conn.execute("SELECT dag_id FROM dag")}
    assert listed <= repository_dag_ids(), (
        f"DAGs that are not the repository's: {sorted(listed - repository_dag_ids())}"
    )
