"""Reading the slot ahead of its consumer: blocks in order, errors handed over, and no fetch left running."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from walflow.capture.prefetch import BlockPrefetch


class SlowCursor:
    """A server-side cursor whose second fetch waits on the server until it is cancelled."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.fetches = 0
        self.connection = self

    def fetchmany(self, rows: int) -> list[Any]:
        self.fetches += 1
        if self.fetches == 1:
            return [(i,) for i in range(rows)]
        if not self.cancelled.wait(timeout=30):
            return []
        raise RuntimeError("canceling statement due to user request")

    def cancel_safe(self) -> None:
        self.cancelled.set()


def test_blocks_arrive_in_order_and_errors_reach_the_consumer() -> None:
    class Failing:
        connection = None

        def __init__(self) -> None:
            self.calls = 0

        def fetchmany(self, rows: int) -> list[Any]:
            self.calls += 1
            if self.calls == 3:
                raise ConnectionError("server closed the connection")
            return [(self.calls, i) for i in range(rows)]

    blocks = BlockPrefetch(Failing(), 2)
    assert blocks.next() == [(1, 0), (1, 1)] and blocks.next() == [(2, 0), (2, 1)]
    with pytest.raises(ConnectionError, match="server closed"):
        blocks.next()
    blocks.close()


def test_closing_early_cancels_a_fetch_the_server_is_still_running() -> None:
    """A consumer that stops (an error, the task told to stop) does not wait for a fetch that can take minutes."""
    cursor = SlowCursor()
    blocks = BlockPrefetch(cursor, 3)
    assert blocks.next() == [(0,), (1,), (2,)]
    started = time.monotonic()
    blocks.close()
    assert cursor.cancelled.is_set() and time.monotonic() - started < 10
