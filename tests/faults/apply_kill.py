"""Test-only hooks for the lake job: SIGKILL it at one of its points
(``WALFLOW_APPLY_HOOKS=tests.faults.apply_kill:KillAt``).

``WALFLOW_APPLY_FAULT=<point>[:<n>]`` names the point (one of :data:`walflow.lake.hooks.POINTS`) and which visit of
it (the n-th table to reach it); ``WALFLOW_APPLY_FAULT_FILE`` a file where the point is written just before the
kill, so the test can tell that the kill happened where it asked.
"""

from __future__ import annotations

import os
import signal
import sys

from walflow.lake.hooks import POINTS, ApplyHooks


class KillAt(ApplyHooks):
    def __init__(self) -> None:
        name, _, nth = os.environ.get("WALFLOW_APPLY_FAULT", "").partition(":")
        if name not in POINTS:
            raise ValueError(f"WALFLOW_APPLY_FAULT={name!r} is not one of {POINTS}")
        self.point, self.nth, self.hits = name, int(nth or 1), 0

    def reached(self, point: str, table: str) -> None:
        if point != self.point:
            return
        self.hits += 1
        if self.hits != self.nth:
            return
        marker = os.environ.get("WALFLOW_APPLY_FAULT_FILE")
        if marker:
            with open(marker, "w") as fh:
                fh.write(point)
                fh.flush()
                os.fsync(fh.fileno())
        print(f"WALFLOW_APPLY_FAULT {point} ({table}): killing the job", file=sys.stderr, flush=True)
        # The driver's parent is the spark-submit JVM in client mode: it is killed too, so the whole job dies at
        # once as with kill -9, with no shutdown hook running.
        try:
            with open(f"/proc/{os.getppid()}/cmdline", "rb") as fh:
                parent = fh.read()
        except OSError:
            parent = b""
        if b"org.apache.spark.deploy.SparkSubmit" in parent:
            os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
