"""The Airflow UI path for real: the snapshot DAG's trigger form in headless Chromium (Debian's), via Playwright.

The Airflow API server runs on the embedded runtime; the run the form created is checked through the REST API
(its DAG and its conf), its signal task is then executed with ``airflow tasks test`` (no scheduler needed), and
the signal it wrote is read back from the source database by its id.

Without Chromium or Playwright the test skips, except under CI (``CI=true``), where it fails: there the UI path
must really be tested.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import psycopg
import pytest

from tests.support import airflow_connector, unique

pytestmark = pytest.mark.timeout(900)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> bool:
    if CHROMIUM.exists():
        return True
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"], env=env, capture_output=True, timeout=900)
    return CHROMIUM.exists()


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}; under CI the browser test must run: install Debian's chromium (apt-get install chromium) and the pinned playwright (requirements.txt)")
    pytest.skip(reason)


def _api(base: str, path: str) -> Any:
    """GET a REST API path with a token from the simple auth manager (every user is an admin here)."""
    with urllib.request.urlopen(f"{base}/auth/token", timeout=10) as response:
        token = json.load(response)["access_token"]
    request = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def ui_env(database: str, kafka_bootstrap: str, tmp_path: Path) -> dict[str, str]:
    if not _chromium():
        _unavailable(f"Debian's chromium package is not installed ({CHROMIUM}) and could not be installed")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright package is not installed")
    name = unique("ui")
    settings = ("snapshot.mode: no_data", "signal.data.collection: public.walflow_signal", "walflow.lake.enabled: false")
    env = {
        **os.environ,
        **airflow_connector(tmp_path, name, database, kafka_bootstrap, *settings),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
    }
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
    subprocess.run(["airflow", "dags", "test", f"{name}__setup"], env=env, check=True, capture_output=True, timeout=300)
    subprocess.run(["airflow", "dags", "reserialize"], env=env, check=True, capture_output=True, timeout=300)
    return {"name": name, "dsn": database, **{k: v for k, v in env.items() if k.startswith(("AIRFLOW", "WALFLOW"))}}


def test_trigger_form_writes_the_signal(ui_env: dict[str, str], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    name, dsn = ui_env["name"], ui_env["dsn"]
    dag_id = f"{name}__snapshot"
    env = {**os.environ, **{k: v for k, v in ui_env.items() if k.startswith(("AIRFLOW", "WALFLOW"))}}
    port = _free_port()
    server = subprocess.Popen(
        ["airflow", "api-server", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("the Airflow API server did not start")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base}/dags/{dag_id}", wait_until="networkidle", timeout=120_000)
            page.get_by_role("button", name="Trigger").first.click()
            dialog = page.locator("[role=dialog][data-state=open]")
            dialog.get_by_placeholder("Enter each string on a new line").fill("public.items")
            page.screenshot(path=str(tmp_path / "trigger-form.png"))
            dialog.get_by_role("button", name="Trigger").click()
            page.wait_for_url(f"**/dags/{dag_id}/runs/**", timeout=60_000)
            run_id = unquote(page.url.split("/runs/")[1].split("/")[0].split("?")[0])
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(tmp_path / "run.png"))
            browser.close()
        # the run exists for this DAG, created by the form, with the form's value in its conf
        runs = _api(base, f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns")["dag_runs"]
        assert [r["dag_run_id"] for r in runs] == [run_id]
        run = _api(base, f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}")
        assert run["dag_id"] == dag_id and run["run_type"] == "manual"
        assert run["conf"]["data_collections"] == ["public.items"]
        # that run's signal task writes the signal; its id (the task's XCom) is logged
        done = subprocess.run(["airflow", "tasks", "test", dag_id, "signal", run_id], env=env, check=True, capture_output=True, text=True, timeout=300)
        written = re.search(r"wrote signal (\w+) execute-snapshot", done.stdout + done.stderr)
        assert written, (done.stdout + done.stderr)[-3000:]
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT id, type, data FROM walflow_signal").fetchall()
        assert len(rows) == 1
        signal_id, kind, data = rows[0]
        assert signal_id == written.group(1) and kind == "execute-snapshot"
        assert json.loads(data) == {"data-collections": ["public.items"], "type": "incremental"}
    finally:
        os.killpg(server.pid, 15)
        server.wait(30)
