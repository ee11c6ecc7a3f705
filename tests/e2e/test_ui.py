"""The Airflow UI path for real, in headless Chromium (Debian's) driven by Playwright, against the Airflow API server
and a scheduler with its LocalExecutor on the tests' runtime.

A stream DAG runs through the scheduler (so its task log is a real one), the snapshot DAG is triggered from its form
as Airflow offers it ("Unpause on trigger" offered and ticked; the test unticks it and unpauses the DAG after the
trigger, see the test), the form refuses an empty table list, the run writes its signal,
the next stream run executes it, and no run fails, scheduled or not. Screenshots of the DAG list, the stream grid, a
stream task log and the snapshot form go to ``artifacts/ui/`` (``WALFLOW_ARTIFACTS_DIR`` overrides the folder),
which CI keeps; docs/ui.md shows them.

Without Chromium or Playwright the test skips, except under CI (``CI=true``), where it fails: there the UI path
must really be tested.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from sandbox.embedded import free_port
from tests.requires import unavailable
from tests.support import airflow_connector, read_topic, setup, unique
from walflow.config.files import load_config

pytestmark = pytest.mark.timeout(900)

#: How long a request waits for the API server's answer: longer than the minute a write on the embedded runtime's
#: SQLite database may wait for another process's (sandbox/embedded.py), so that a slow answer is still seen.
SERVER_WAIT = 150

ROOT = Path(__file__).resolve().parents[2]
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


def artifacts() -> Path:
    folder = Path(os.environ.get("WALFLOW_ARTIFACTS_DIR", ROOT / "artifacts")) / "ui"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _chromium() -> bool:
    if CHROMIUM.exists():
        return True
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"],
        env=env,
        capture_output=True,
        timeout=900,
    )
    return CHROMIUM.exists()


def _unavailable(reason: str) -> None:
    unavailable(
        reason, "install Debian's chromium (apt-get install chromium) and the pinned playwright (requirements.txt)"
    )


def admin_password(env: dict[str, str]) -> str:
    """The admin's password that `make up` generated into the runtime's simple-auth-manager passwords file."""
    return json.loads(Path(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]).read_text())["admin"]


class Api:
    """The REST API with a token the simple auth manager gives for the runtime's admin and password."""

    def __init__(self, base: str, password: str) -> None:
        self.base = base
        self.password = password
        self._token: str | None = None

    def token(self) -> str:
        # one token for the test (the simple auth manager's tokens last hours): asking for one per call doubled the
        # requests to an API server that, with every lane of make test beside it, has answered a request in over 10 s
        if self._token is None:
            request = urllib.request.Request(
                f"{self.base}/auth/token", data=json.dumps({"username": "admin", "password": self.password}).encode(),
                method="POST", headers={"Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(request, timeout=SERVER_WAIT) as response:
                self._token = str(json.load(response)["access_token"])
        return self._token

    def __call__(self, path: str, body: Any = None, method: str | None = None, *, again: bool = False) -> Any:
        """Send one request and return its JSON answer.

        A request that only reads or sets values (GET, PATCH, DELETE), or one the caller says may be sent again
        (``again``), is sent again when the server does not answer in time or answers 500 or 503: on the embedded
        runtime's SQLite metadata database a write waits up to SQLite's busy timeout (a minute, see
        sandbox/embedded.py) for another process's, and then fails with "database is locked". The client waits
        longer than that timeout, so that it sees the server's answer rather than its own timeout."""
        data = json.dumps(body).encode() if body is not None else None
        attempts = 3 if again or method in (None, "GET", "PATCH", "DELETE") else 1
        for attempt in range(attempts):
            request = urllib.request.Request(
                f"{self.base}{path}", data=data, method=method,
                headers={"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"},
            )  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=SERVER_WAIT) as response:
                    raw = response.read()
                break
            except urllib.error.HTTPError as error:
                if error.code not in (500, 503) or attempt == attempts - 1:
                    raise
            except TimeoutError:
                if attempt == attempts - 1:
                    raise
        return json.loads(raw) if raw else None

    def trigger(self, dag_id: str) -> str:
        """Trigger a run of ``dag_id`` under a run id of the test's choosing, so that a trigger sent again after a
        timeout cannot make a second run: Airflow answers 409 to a run id it already has. Return the run id."""
        run_id = f"manual__{uuid.uuid4().hex}"
        path = f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns"
        try:
            self(path, {"dag_run_id": run_id, "logical_date": None}, "POST", again=True)
        except urllib.error.HTTPError as error:
            if error.code != 409:
                raise
            # the first try was done, though its answer did not come back in time: that run is the one asked for
            self(f"{path}/{run_id}")
        return run_id

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return self(f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns")["dag_runs"]

    def wait_for_runs(self, dag_id: str, done: int, timeout: float = 240) -> list[dict[str, Any]]:
        """Wait until at least ``done`` runs of ``dag_id`` have finished; return every run."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.runs(dag_id)
            if sum(r["state"] in ("success", "failed") for r in runs) >= done:
                return runs
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{dag_id}: runs still not finished after {timeout} s:"
                    f" {[(r['dag_run_id'], r['state']) for r in runs]}"
                )
            time.sleep(1)


def _forget_dags(api: Api, name: str) -> None:
    """Delete this test's DAGs (and their runs) from the tests' Airflow database: an unpaused stream DAG left there
    would have every later scheduler of that database start its runs, whose DAG file is gone with this test."""
    for suffix in ("setup", "stream", "snapshot", "monitor"):
        try:
            api(f"/api/v2/dags/{quote(f'{name}__{suffix}', safe='')}", method="DELETE")
        except OSError:
            pass  # the API server is gone: the DAGs stay, paused ones harmless, and the next run's names differ


def sign_in(page: Any, url: str, password: str) -> None:
    """Open ``url``, which sends a visitor to the UI's login page, and sign in there as the runtime's admin with the
    password `make up` printed. The timeouts are for a loaded machine: make test-long runs this beside five other
    lanes on two cores, where the UI may take far longer than Playwright's defaults (5 s for an assertion, 30 s for an
    action) to render a dialog or a log."""
    from playwright.sync_api import expect

    page.set_default_timeout(90_000)
    expect.set_options(timeout=60_000)
    page.goto(url, wait_until="networkidle", timeout=120_000)
    page.wait_for_url("**/auth/login**", timeout=60_000)
    page.locator("input[name=username]").fill("admin")
    page.locator("input[type=password]").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/login" not in url, timeout=60_000)


@pytest.fixture()
def airflow(database: str, kafka_bootstrap: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A connector with a signal table (no lake, to keep Spark out of this test), set up, and the API server and a
    scheduler running on the tests' Airflow home."""
    if not _chromium():
        _unavailable(f"Debian's chromium package is not installed ({CHROMIUM}) and could not be installed")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright package is not installed")
    name = unique("ui")
    # the sensor pokes every 3 s: with 1 s, Airflow's scheduler once queued the rescheduled try before it had read
    # the executor's report of the first one, and then failed the task ("finished with state success, but the task
    # instance's state attribute is queued"), a race of Airflow's, not of the sensor
    settings = (
        "snapshot.mode: no_data",
        "signal.data.collection: public.walflow_signal",
        "walflow.lake.enabled: false",
        "walflow.snapshot.poke.seconds: 3",
        "incremental.snapshot.chunk.size: 20",
    )
    port = free_port()
    env = {
        **os.environ,
        **airflow_connector(tmp_path, name, database, kafka_bootstrap, *settings),
        # the LocalExecutor's tasks report to this API server
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
    }
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 50) g")
    # the setup task's work, in this process (tests/e2e/test_dags.py runs the setup DAG itself)
    setup(load_config(tmp_path / f"{name}.yaml"), database)
    subprocess.run(["airflow", "dags", "reserialize"], env=env, check=True, capture_output=True, timeout=300)
    log = (tmp_path / "airflow.log").open("w")
    processes = [
        subprocess.Popen(
            ["airflow", "api-server", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        ),
        subprocess.Popen(["airflow", "scheduler"], env=env, stdout=log, stderr=log, start_new_session=True),
    ]
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("the Airflow API server did not start")
        yield {"name": name, "dsn": database, "env": env, "base": base, "api": Api(base, admin_password(env))}
    finally:
        _forget_dags(Api(base, admin_password(env)), name)
        for proc in processes:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in processes:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:  # a scheduler waits for its running tasks: do not wait for a sensor
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        log.close()
        # pytest shows a teardown's output only for a test that failed: there, the API server's and the scheduler's
        # last lines say what they were doing (a request waiting on a locked database, a task the scheduler failed)
        lines = (tmp_path / "airflow.log").read_text(errors="replace").splitlines()
        print("\n".join(["--- the last lines of the API server's and the scheduler's log", *lines[-80:]]))


@pytest.mark.long
def test_the_ui_triggers_a_safe_snapshot_and_shows_the_stream(airflow: dict[str, Any]) -> None:
    from playwright.sync_api import expect, sync_playwright

    name, dsn, base, api = airflow["name"], airflow["dsn"], airflow["base"], airflow["api"]
    stream_id, snapshot_id = f"{name}__stream", f"{name}__snapshot"
    shots = artifacts()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = 'changed' WHERE id <= 5")
    # the stream DAG, unpaused: its scheduled run and one triggered by hand, both through the scheduler
    api(f"/api/v2/dags/{stream_id}", {"is_paused": False}, "PATCH")
    api.trigger(stream_id)
    runs = api.wait_for_runs(stream_id, 2)
    # every finished run succeeded; a later scheduled run may have started meanwhile (the schedule's next interval
    # began while the test ran) and still be running
    finished = [r for r in runs if r["state"] in ("success", "failed")]
    assert len(finished) >= 2 and {r["state"] for r in finished} == {"success"}, runs
    stream_run = next(r for r in runs if r["run_type"] == "manual")["dag_run_id"]

    # the embedded runtime asks for credentials: the API without a token, a wrong password, both refused
    for request in (
        urllib.request.Request(f"{base}/api/v2/dags"),
        urllib.request.Request(
            f"{base}/auth/token",
            data=json.dumps({"username": "admin", "password": "guess"}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        ),
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code in (401, 403), refused.value

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        sign_in(page, f"{base}/dags?tags={name}", api.password)
        page.goto(f"{base}/dags?tags={name}", wait_until="networkidle", timeout=120_000)
        expect(page.get_by_text(snapshot_id)).to_be_visible()
        page.screenshot(path=str(shots / "dag-list.png"))
        page.goto(f"{base}/dags/{stream_id}", wait_until="networkidle", timeout=120_000)
        # "networkidle" can come before the page has drawn (CI shot a blank 5.7 kB page once): the shot waits for the
        # DAG's header, its run figures and the grid's task row
        expect(page.get_by_text("Latest Run").first).to_be_visible()
        expect(page.get_by_text("Failed Runs").first).to_be_visible()
        expect(page.get_by_text("stream", exact=True).first).to_be_visible()
        page.screenshot(path=str(shots / "stream-grid.png"))
        page.goto(
            f"{base}/dags/{stream_id}/runs/{quote(stream_run, safe='')}/tasks/stream",
            wait_until="networkidle",
            timeout=120_000,
        )
        expect(page.get_by_text("batch done").first).to_be_visible(timeout=60_000)
        expect(page.get_by_text("streaming metrics").first).to_be_visible()
        page.screenshot(path=str(shots / "stream-task-log.png"))

        # the snapshot form, as Airflow offers it: the DAG is paused, "Unpause on trigger" is ticked
        page.goto(f"{base}/dags/{snapshot_id}", wait_until="networkidle", timeout=120_000)
        page.get_by_role("button", name="Trigger").first.click()
        dialog = page.locator("[role=dialog][data-state=open]")
        expect(dialog.get_by_text(f"Unpause {snapshot_id} on trigger")).to_be_visible()
        expect(dialog.get_by_role("checkbox").first).to_be_checked()
        # no tables: the form says the field is required and will not trigger
        expect(dialog.get_by_text("This field is required")).to_be_visible()
        expect(dialog.get_by_role("button", name="Trigger")).to_be_disabled()
        dialog.get_by_placeholder("Enter each string on a new line").fill("public.items")
        expect(dialog.get_by_role("button", name="Trigger")).to_be_enabled()
        page.screenshot(path=str(shots / "snapshot-form.png"))
        # Ticked, the box has the form send the trigger and the unpause as two requests at once, and on the
        # embedded runtime's SQLite these can lock each other until SQLite's busy timeout (a minute; seen once in
        # ten runs: the unpause failed with "database is locked"). The test unticks it and unpauses afterwards.
        dialog.get_by_text(f"Unpause {snapshot_id} on trigger").click()  # its label, as a user clicks it
        expect(dialog.get_by_role("checkbox").first).not_to_be_checked()
        dialog.get_by_role("button", name="Trigger").click()
        page.wait_for_url(f"**/dags/{snapshot_id}/runs/**", timeout=60_000)
        browser.close()

    assert api(f"/api/v2/dags/{snapshot_id}")["is_paused"] is True  # the run waits, queued, until the DAG is unpaused
    api(f"/api/v2/dags/{snapshot_id}", {"is_paused": False}, "PATCH")
    details = api(f"/api/v2/dags/{snapshot_id}")
    assert details["is_paused"] is False
    assert details["next_dagrun_run_after"] is None  # unpaused, and the scheduler will never start a run of it
    (run,) = api.runs(snapshot_id)
    assert run["run_type"] == "manual" and run["conf"]["data_collections"] == ["public.items"]
    # its signal task writes the signal; the next stream run executes the snapshot; its sensor then succeeds
    deadline = time.monotonic() + 240  # as long as a run may take to finish (Api.wait_for_runs)
    while not _signals(dsn) and time.monotonic() < deadline:
        time.sleep(1)
    assert _signals(dsn) == [{"data-collections": ["public.items"], "type": "incremental"}]
    api.trigger(stream_id)
    api.wait_for_runs(snapshot_id, 1)
    api.wait_for_runs(stream_id, 3)
    time.sleep(3)  # a few more scheduler loops: still no scheduled snapshot run, and nothing failed
    snapshot_runs, stream_runs = api.runs(snapshot_id), api.runs(stream_id)
    assert [r["state"] for r in snapshot_runs] == ["success"], snapshot_runs
    assert all(r["state"] in ("success", "running", "queued") for r in stream_runs), stream_runs
    snapshot_rows = [r for r in read_topic(f"{name}.public.items") if r.op == "r"]
    assert len(snapshot_rows) == 50

    # backfills still get one run per interval of the DAG's schedule (dry run: the scheduler would run them)
    backfill = subprocess.run(
        [
            "airflow",
            "backfill",
            "create",
            "--dag-id",
            snapshot_id,
            "--from-date",
            "2024-03-01",
            "--to-date",
            "2024-03-03",
            "--dag-run-conf",
            json.dumps({"data_collections": ["public.items"]}),
            "--dry-run",
        ],
        env=airflow["env"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert backfill.returncode == 0, backfill.stderr[-2000:]
    for day in ("2024-03-01", "2024-03-02", "2024-03-03"):
        assert f"{day} 00:00:00+00:00" in backfill.stdout, backfill.stdout[-2000:]
    for shot in ("dag-list.png", "stream-grid.png", "stream-task-log.png", "snapshot-form.png"):
        assert (shots / shot).stat().st_size > 10_000


@pytest.mark.long
def test_the_walflow_page_shows_the_connectors_as_walflow_status_does(airflow: dict[str, Any]) -> None:
    """The walflow page of Airflow's UI, behind Airflow's login: the overview and the connector's page, while its
    stream DAG runs, show what `walflow status --json` prints and what the database says (slot position, last
    batch), and the page's route refuses a request without a session."""
    from playwright.sync_api import expect, sync_playwright

    name, dsn, base, api = airflow["name"], airflow["dsn"], airflow["base"], airflow["api"]
    stream_id = f"{name}__stream"
    shots = artifacts()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = 'seen' WHERE id <= 7")
    api(f"/api/v2/dags/{stream_id}", {"is_paused": False}, "PATCH")
    api.trigger(stream_id)
    api.wait_for_runs(stream_id, 1)
    # the route is Airflow's: no session, no status
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/walflow/api/status", timeout=30)
    assert refused.value.code == 401, refused.value

    def cli(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            ["walflow", "status", "--json", *args], env=airflow["env"], capture_output=True, text=True, timeout=300
        )
        assert done.returncode in (0, 1), done.stderr[-2000:]
        return dict(json.loads(done.stdout))

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        sign_in(page, f"{base}/walflow/", api.password)  # the page is behind Airflow's own login
        # the page in Airflow's navigation (an external view: the UI frames the plugin's page)
        page.goto(f"{base}/plugin/walflow", wait_until="networkidle", timeout=120_000)
        frame = page.frame_locator("iframe").first
        row = frame.locator(f"tr[data-connector='{name}']")
        expect(row).to_be_visible()
        page.screenshot(path=str(shots / "walflow-overview.png"))
        everything = cli()
        (listed,) = [c for c in everything["connectors"] if c["connector"] == name]
        expect(row.locator("[data-state]").first).to_have_text(listed["state"])
        expect(row.get_by_role("link", name=stream_id)).to_be_visible()

        # the connector's page (opened by its link), against the CLI and the database
        for _attempt in range(3):
            page.goto(f"{base}/walflow/connectors/{quote(name, safe='')}", wait_until="networkidle", timeout=120_000)
            expect(page.locator("body[data-loaded]")).to_be_attached()
            shown = {
                key: page.locator(f"[data-fact='{key}']").first.inner_text()
                for key in ("confirmed_flush_lsn", "restart_lsn", "wal_status")
            }
            status = cli(name, "--history-hours", "24")
            with psycopg.connect(dsn) as conn:
                confirmed, restart, wal_status = conn.execute(
                    "SELECT confirmed_flush_lsn::text, restart_lsn::text, wal_status FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (name,),
                ).fetchone()
            newest_shown = page.locator("#batches tbody tr").first.get_attribute("data-batch")
            newest_listed = str((status["source"].get("history") or [{}])[-1].get("number"))
            if shown["confirmed_flush_lsn"] == status["source"]["confirmed_flush_lsn"] == confirmed and (
                newest_shown == newest_listed
            ):
                break  # else a scheduled batch ran between the three reads (moving the slot or not): read them again
        assert shown == {"confirmed_flush_lsn": confirmed, "restart_lsn": restart, "wal_status": wal_status}
        assert status["source"]["confirmed_flush_lsn"] == confirmed
        history = status["source"]["history"]
        assert history and history[-1]["number"] == status["source"]["last_batch"]["number"]
        newest = page.locator("#batches tbody tr").first
        expect(newest).to_have_attribute("data-batch", str(history[-1]["number"]))
        expect(newest.locator("td").nth(2)).to_have_text(str(history[-1]["events"]))
        expect(page.locator("[data-plot]")).to_have_count(3)
        expect(page.locator(f"tr[data-dag='{stream_id}']")).to_be_visible()
        expect(page.locator(".state").first).to_have_text(status["state"])
        page.screenshot(path=str(shots / "walflow-connector.png"), full_page=True)
        browser.close()
    for shot in ("walflow-overview.png", "walflow-connector.png"):
        assert (shots / shot).stat().st_size > 10_000


def _signals(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        return [
            json.loads(data)
            for (data,) in conn.execute("SELECT data FROM walflow_signal WHERE type = 'execute-snapshot'").fetchall()
        ]
