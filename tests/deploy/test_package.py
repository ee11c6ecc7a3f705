"""The wheel as a user installs it (make test-deploy's virtual environment, outside the checkout): Airflow lists walflow
among its providers and its timetable among the plugins' in an AIRFLOW_HOME of its own, the files walflow reads at run
time are inside the installed package, and the ``walflow`` command writes the DAG files and prints the SQL."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.deploy.compose import host_environment

ROOT = Path(__file__).resolve().parents[2]


def _run(venv: Path, home: Path, *args: str, keep: tuple[str, ...] = ()) -> str:
    """``args`` in the installed environment: nothing of the checkout's runtime (its Airflow home, connectors, path)."""
    env = host_environment(keep)
    env.update(AIRFLOW_HOME=str(home), PATH=f"{venv / 'bin'}:{env['PATH']}")
    result = subprocess.run(list(args), check=False, capture_output=True, text=True, env=env, cwd=home, timeout=300)
    assert result.returncode == 0, f"{args}: {result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.parametrize("install", ["WALFLOW_DEPLOY_VENV", "WALFLOW_DEPLOY_CAPTURE_VENV"])
def test_the_installed_wheel_is_a_provider_with_its_files(tmp_path: Path, install: str) -> None:
    """With the lake extra (uv, the deployment's environment) and without it (pip, into an empty environment)."""
    venv = Path(os.environ[install])
    home = tmp_path / "airflow-home"
    home.mkdir()
    providers = _run(venv, home, "airflow", "providers", "list", "--output", "plain")
    print(next(line for line in providers.splitlines() if line.startswith("walflow")))
    assert any(line.split()[0] == "walflow" for line in providers.splitlines() if line.strip())
    plugins = _run(venv, home, "airflow", "plugins", "--output", "plain")
    assert "walflow.airflow.timetables.BackfillOnlyTimetable" in plugins, plugins[-2000:]
    found = _run(
        venv,
        home,
        "python",
        "-c",
        """
import importlib.resources as r
for package, name in (("walflow.lake.spark", "apply_changes.py"), ("walflow.lake.spark", "maintain_lake.py"),
                      ("walflow.source.sql", "roles.sql"), ("walflow.source.sql", "ddl_facts.sql"),
                      ("walflow.config.examples", "inventory.yaml"),
                      ("walflow.airflow.dag_files", "walflow_connectors.py"),
                      ("walflow.airflow.pages", "walflow.html")):
    print(r.files(package).joinpath(name))
""",
    ).split()
    print("\n".join(found))
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert len(found) == 7 and all(Path(p).is_file() and Path(p).is_relative_to(site) for p in found), found
    _run(venv, home, "walflow", "dag-files", str(home / "dags"))
    assert sorted(p.name for p in (home / "dags").iterdir()) == ["walflow_connector_errors.py", "walflow_connectors.py"]
    assert "CREATE" in _run(venv, home, "walflow", "sql", "roles") and "name: inventory" in _run(
        venv, home, "walflow", "example-connector"
    )


_DAGBAG = """
import json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
lake = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "pyiceberg", "pyarrow"))
print(json.dumps({"dags": sorted(bag.dag_ids), "errors": {k: str(v) for k, v in bag.import_errors.items()},
                  "lake": lake}))
"""


def test_without_the_lake_extra_capture_connectors_load_and_a_lake_connector_names_the_extra(tmp_path: Path) -> None:
    """The wheel installed without ``[lake]`` (no Spark provider, pyspark, pyiceberg, pyarrow): the DAG files build a
    capture-only connector's DAGs without importing any of them, and a connector whose lake is on is an import error
    that names the extra."""
    import json

    venv = Path(os.environ["WALFLOW_DEPLOY_CAPTURE_VENV"])
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert not (site / "pyspark").exists() and not (site / "airflow" / "providers" / "apache" / "spark").exists()
    home = tmp_path / "airflow-home"
    connectors = tmp_path / "connectors"
    connectors.mkdir()
    base = "topic.prefix: {0}\nslot.name: {0}\nwalflow.postgres.conn.id: postgres_default\n"
    (connectors / "capture.yaml").write_text(
        "name: capture\n" + base.format("capture") + "walflow.lake.enabled: false\n"
    )
    (connectors / "withlake.yaml").write_text("name: withlake\n" + base.format("withlake"))
    home.mkdir()
    _run(venv, home, "walflow", "dag-files", str(home / "dags"))
    os.environ["WALFLOW_CONNECTORS_DIR"] = str(connectors)
    try:
        out = _run(venv, home, "python", "-c", _DAGBAG, str(home / "dags"), keep=("WALFLOW_CONNECTORS_DIR",))
    finally:
        del os.environ["WALFLOW_CONNECTORS_DIR"]
    found = json.loads(out.strip().splitlines()[-1])
    assert found["lake"] == [] and found["dags"] == ["capture__monitor", "capture__setup", "capture__stream"], found
    (message,) = found["errors"].values()
    print(message)
    assert "withlake.yaml" in message and "pip install 'walflow[lake]'" in message and "pyspark" in message
