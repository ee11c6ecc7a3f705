"""The incremental snapshots' queue: the signals queued behind the running one and those waiting for room, and the
progress saved with each signal's status.

Each ``execute-snapshot`` signal is its own snapshot: one arriving while another runs is queued behind it (it may
name the same table with another condition, as the runs of a backfill do); one arriving when
``walflow.signal.queue.max`` snapshots are queued waits in the state table until a snapshot ends. Every signal id ends
``completed``, ``stopped`` or ``failed`` in the state table, which is what the snapshot DAG's sensor waits for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from walflow.capture.incremental.progress import SnapshotProgress
from walflow.capture.incremental.state import SIGNALS_KEY, STATE_KEY, WAITING_KEY, SnapshotState
from walflow.records.events import now_ms
from walflow.source.signals import signal_key

log = logging.getLogger("walflow.capture.incremental")


class SnapshotQueue:
    """Queued and waiting signals, and the save of the progress (see the module's docstring).

    :param start_waiting: queues a waiting signal when room is made (checked then, failed as on arrival).
    """

    def __init__(self, state: SnapshotState, start_waiting: Callable[[str, dict[str, Any], list[Any]], None]) -> None:
        self.state = state
        self.config = state.config
        self.start_waiting = start_waiting
        #: signals waiting for room in the queue (:meth:`wait`), and how many the state table says
        self.waiting = self._waiting_saved = int((state.store.get(WAITING_KEY) or {}).get("count") or 0)

    def save(self) -> None:
        if not self.state.dirty:
            return
        for signal_id, outcome in self.state.outcomes.items():
            self.state.store.put(signal_key(signal_id), outcome)
        self.state.outcomes.clear()
        progress = self.state.progress
        while progress is not None and not progress.tables:
            if not progress.ended:
                status = "stopped" if progress.stopped_by else "completed"
                outcome = {
                    "status": status,
                    "rows": progress.rows,
                    "chunks": progress.chunks,
                    "rows_per_table": progress.rows_per_table,
                    "at_ms": now_ms(),
                }
                if progress.stopped_by:
                    outcome["by"] = progress.stopped_by
                self.state.store.put(signal_key(progress.signal_id), outcome)
                log.info(
                    "incremental snapshot %s %s: %d row(s) in %d chunk(s)",
                    progress.signal_id,
                    status,
                    progress.rows,
                    progress.chunks,
                )
            progress = self._next_signal(progress)
        self.state.progress = progress
        if self.waiting and (progress is None or len(progress.queued) < self.config.walflow_signal_queue_max):
            self.promote()
            progress = self.state.progress
        if progress is None:
            self.state.store.delete(STATE_KEY)
        else:
            self.state.store.put(STATE_KEY, progress.as_dict())
            self.state.store.put(
                signal_key(progress.signal_id),
                {
                    "status": "paused" if progress.paused else "running",
                    "tables_left": progress.tables,
                    "rows": progress.rows,
                    "chunks": progress.chunks,
                    "at_ms": now_ms(),
                },
            )
        if self.waiting != self._waiting_saved:
            self.state.store.put(WAITING_KEY, {"count": self.waiting})
            self._waiting_saved = self.waiting
        if self.state.signals_read > self.state.signals_upto:
            # after the progress: a crash between the two leaves signals to be read again, which known() covers
            self.state.store.put(SIGNALS_KEY, {"lsn": self.state.signals_read})
            self.state.signals_upto = self.state.signals_read
        self.state.dirty = False

    def _next_signal(self, finished: SnapshotProgress) -> SnapshotProgress | None:
        """The queued signal that runs after ``finished``; it inherits the pause state (a pause is the connector's)."""
        if not finished.queued:
            return None
        entry, rest = finished.queued[0], finished.queued[1:]
        following = SnapshotProgress(
            signal_id=entry.signal_id,
            tables=list(entry.tables),
            condition=dict(entry.condition),
            surrogate_key=entry.surrogate_key,
            paused=finished.paused,
            stopped_by=entry.stopped_by,
            queued=rest,
        )
        # planned tables carry the previous signal's condition and key
        self.state.tables.clear()
        self.state.notify(following, "STARTED", {"data_collections": ",".join(following.tables)})
        log.info(
            "incremental snapshot %s: starting %s (queued behind %s)",
            following.signal_id,
            following.tables,
            finished.signal_id,
        )
        return following

    def known(self, signal_id: str) -> bool:
        """Whether this execute-snapshot signal is already in the saved progress (running or queued) or finished.

        The saved progress is written before the slot advances, so a batch that dies in between reads the same
        signals again from the slot; they must not start a second snapshot. A signal whose batch died before the
        save is not in the progress and runs when it is read again.
        """
        progress = self.state.progress
        if progress is not None and (
            progress.signal_id == signal_id or any(q.signal_id == signal_id for q in progress.queued)
        ):
            return True
        outcome = self.state.store.get(signal_key(signal_id)) or {}
        return outcome.get("status") in ("completed", "stopped")

    def wait(self, signal_id: str, data: dict[str, Any], lsn: int | None) -> None:
        """Keep an execute-snapshot signal that finds the queue full in the state table, status ``waiting``, until a
        snapshot ends and makes room (:meth:`promote`): one ``INSERT ... SELECT`` of thousands of signals then costs
        the batch a row each, never thousands of snapshots queued at once. It is checked when it is queued."""
        at = now_ms()
        # "order": arrival order (the signal's position in the WAL, then the time), which find() sorts by
        self.state.store.put(
            signal_key(signal_id),
            {"status": "waiting", "data": data, "order": f"{lsn or 0:020d}:{at:015d}", "at_ms": at},
        )
        self.waiting += 1
        self.state.dirty = True
        log.info(
            "signal %s waits: %d incremental snapshot(s) are queued, as many as walflow.signal.queue.max allows; it is "
            "queued when one of them ends (%d signal(s) wait)",
            signal_id,
            self.config.walflow_signal_queue_max,
            self.waiting,
        )

    def promote(self) -> None:
        """Queue waiting signals (:meth:`wait`), oldest first, while the queue has room; each is checked now, and
        one that fails its checks fails as it would have on arrival."""
        limit = self.config.walflow_signal_queue_max
        while self.waiting > 0:
            room = limit - len(self.state.progress.queued) if self.state.progress is not None else limit + 1
            if room <= 0:
                break
            waiting = self.state.store.find("signal:", "waiting", room)
            if not waiting:
                self.waiting = 0
                break
            for key, value in waiting:
                signal_id = key.removeprefix("signal:")
                self.waiting -= 1
                self.start_waiting(signal_id, value.get("data") or {}, value.get("stops") or [])
        self.waiting = max(self.waiting, 0)

    def stop_waiting(self, signal_id: str, patterns: list[str] | None) -> None:
        """A stop-snapshot reaches the signals that wait too: without ``data-collections`` they end ``stopped``;
        with it, each waiting signal notes the stop, and its tables that match are left out when it is queued
        (``SignalActions.execute``). Read a page at a time: waiting signals are never all held in memory."""
        after = ("", "")
        while page := self.state.store.find("signal:", "waiting", 200, after):
            for key, value in page:
                if patterns:
                    value["stops"] = [*(value.get("stops") or []), {"by": signal_id, "data-collections": patterns}]
                    self.state.store.put(key, value)
                else:
                    self.state.store.put(
                        key, {"status": "stopped", "by": signal_id, "rows": 0, "chunks": 0, "at_ms": now_ms()}
                    )
                    self.waiting -= 1
            after = (str(page[-1][1].get("order") or ""), page[-1][0])
        self.waiting = max(self.waiting, 0)
        self.state.dirty = True

    def record_outcome(self, signal_id: str, outcome: dict[str, Any]) -> None:
        """A signal's final status, written by :meth:`save` (after the batch's records were acknowledged)."""
        self.state.outcomes[signal_id] = outcome
        self.state.dirty = True
