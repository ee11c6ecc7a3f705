"""A failure callback for the DAG tests (``walflow.on.failure.callback: tests.e2e.callbacks.record``): it writes
the failed task's id and error to the file named by ``WALFLOW_TEST_CALLBACK_FILE``."""

from __future__ import annotations

import os
from typing import Any


def record(context: Any) -> None:
    path = os.environ.get("WALFLOW_TEST_CALLBACK_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{context['ti'].task_id}: {context.get('exception')}\n")
