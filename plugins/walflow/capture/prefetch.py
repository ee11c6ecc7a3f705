"""Reading a server-side cursor ahead of its consumer: :class:`BlockPrefetch` fetches the next blocks of rows in a
thread while the caller converts the current one (the stream's read of the replication slot)."""

from __future__ import annotations

import queue
import threading
from typing import Any

#: blocks fetched ahead of the one being converted
PREFETCH_BLOCKS = 2
#: seconds :meth:`BlockPrefetch.close` lets a fetch under way finish before it asks the server to cancel it
CANCEL_AFTER_S = 1.0


class BlockPrefetch:
    """Blocks of the slot's rows fetched by a thread of their own while the previous block is converted.

    The wait for PostgreSQL (decoding the WAL, sending the rows) releases the interpreter lock, so it overlaps
    the conversion instead of following it. Memory stays bounded: at most ``depth`` blocks wait in the queue.
    The thread alone uses the cursor until :meth:`close` returns; errors (a server restart) reach the caller at
    its next :meth:`next`.
    """

    def __init__(self, cursor: Any, rows: int, depth: int = PREFETCH_BLOCKS) -> None:
        self._cursor = cursor
        self._rows = rows
        self._blocks: queue.Queue[list[Any] | BaseException] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fetch, name="walflow-stream-fetch", daemon=True)
        self._thread.start()

    def _fetch(self) -> None:
        try:
            while not self._stop.is_set():
                block = self._cursor.fetchmany(self._rows)
                if not self._put(block) or not block:
                    return
        except BaseException as exc:
            self._put(exc)

    def _put(self, item: list[Any] | BaseException) -> bool:
        while not self._stop.is_set():
            try:
                self._blocks.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def next(self) -> list[Any]:
        """The next block of rows ([] at the end)."""
        item = self._blocks.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop fetching and wait for a fetch under way to return (the connection is then free again).

        A fetch can wait minutes for the server (its first block waits for the whole peek to be decoded): when the
        consumer stops early (an error, a signal to stop the task) the server is asked to cancel it, so that the
        slot and its lock are not held by a query nobody reads any more.
        """
        self._stop.set()
        self._thread.join(timeout=CANCEL_AFTER_S)
        if self._thread.is_alive():
            connection = self._cursor.connection
            cancel = getattr(connection, "cancel_safe", None) or connection.cancel
            try:
                cancel()
            except Exception:
                pass
            self._thread.join()
