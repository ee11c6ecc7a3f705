"""A Spark standalone cluster on loopback for the tests: one master and two workers, started with the pyspark
installation's own launcher (``pyspark/bin/spark-class``), each a JVM of its own, so that the lake job's executors
run in separate processes from its driver, as on a real cluster."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.embedded import free_port


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    ui_url: str
    work_dirs: tuple[Path, ...]

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as answer:
            return dict(json.loads(answer.read()))

    def executor_logs(self, app_name: str) -> list[Path]:
        """The stderr files of the executors that the application named ``app_name`` ran on the workers."""
        apps = {
            a["id"]
            for a in self.state().get("completedapps", []) + self.state().get("activeapps", [])
            if a["name"] == app_name
        }
        return sorted(log for folder in self.work_dirs for app in apps for log in (folder / app).glob("*/stderr"))


@contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory: str = "1g") -> Iterator[StandaloneCluster]:
    """Start a master and ``workers`` workers on loopback; stop them (and their executors) when the block ends."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    root = Path(tempfile.mkdtemp(prefix="walflow-spark-cluster-"))
    env = {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        # the executors' Python workers: this interpreter (pyarrow, orjson, confluent-kafka, msgspec installed)
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(root / "logs"),
        # the master and the workers live for one test: the client compiler and the serial collector cost less CPU
        "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }
    port, ui = free_port(), free_port()
    processes: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], log: str) -> None:
        out = (root / log).open("wb")
        processes.append(
            subprocess.Popen(
                [str(spark_class), *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        )

    try:
        start(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            "master.log",
        )
        cluster = StandaloneCluster(
            f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}", tuple(root / f"worker-{i}" for i in range(workers))
        )
        _wait(
            lambda: cluster.state(),
            60,
            f"the Spark master did not answer on {cluster.ui_url} (see {root / 'master.log'})",
        )
        for i, work_dir in enumerate(cluster.work_dirs):
            work_dir.mkdir()
            start(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    cluster.master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--work-dir",
                    str(work_dir),
                    "--webui-port",
                    str(free_port()),
                ],
                f"worker-{i}.log",
            )
        _wait(
            lambda: sum(w["state"] == "ALIVE" for w in cluster.state()["workers"]) == workers or None,
            60,
            f"the Spark workers did not register (see {root})",
        )
        yield cluster
    finally:
        for process in reversed(processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def _wait(check: Any, seconds: float, message: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(message)
