"""The fence: only the newest run of the apply job can publish to a lake table.

The lake lock (:func:`walflow.source.locks.lake_lock`) is held by the Airflow task, not by the Spark driver: a task that
dies (a worker lost, a timeout) can leave its spark-submit running while a retry starts. Both would then apply the
same Kafka records, and a table that takes plain appends (a new table, an insert-only one) would hold every row
twice. Checking a token before a commit cannot close that window, since a MERGE commits minutes after it starts.

So a run never commits to a table's ``main`` branch. For each table it writes, it creates a branch of its own from
``main``'s current snapshot, the very one whose summary gave it the offsets to start from, and runs every data
commit of that table (defaults filled, truncates, merges, appends) on that branch. It then publishes them by
fast-forwarding ``main`` to the branch, which Iceberg refuses, atomically, unless ``main`` is still an ancestor of
the branch: if anything else committed to the table since the run read its offsets, nothing of the run reaches
the table. A run also removes every other run's branch of the table when it opens its own, so an older run
(still writing somewhere) finds its branch gone and cannot publish after a newer one started. Either way the
loser fails with :class:`~walflow.errors.LakeFenceError`, which is retryable: the next run reads the offsets again.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from pyspark.sql import SparkSession

from walflow.errors import LakeFenceError

log = logging.getLogger("walflow.apply")

#: the branches runs of the apply job write on (``<prefix><run id>``); anything else with this prefix is a run's
BRANCH_PREFIX = "walflow_run_"
MAIN = "main"


class Fence:
    """One run's branches: where its commits to each table go until they are published.

    :param run: the run's id (a new random one by default), part of its branches' names.
    """

    def __init__(self, spark: SparkSession, run: str | None = None) -> None:
        self.spark = spark
        self.run = run or uuid.uuid4().hex[:12]
        self.branch = BRANCH_PREFIX + self.run
        #: the tables whose branch this run opened and has not published or discarded yet
        self._open: set[str] = set()

    def _table(self, ident: str) -> Any:
        jvm: Any = self.spark._jvm
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(self.spark._jsparkSession, ident)
        table.refresh()
        return table

    @staticmethod
    def _main(table: Any) -> int | None:
        ref = table.refs().get(MAIN)
        return None if ref is None else int(ref.snapshotId())

    def head(self, ident: str, exists: bool) -> int | None:
        """The snapshot ``main`` of ``ident`` points at (None: the table has none, or does not exist). Read before the
        table's offsets, so that :meth:`open` can tell whether anything committed in between."""
        return self._main(self._table(ident)) if exists else None

    def target(self, ident: str) -> str:
        """What this run's statements write to for ``ident``: its branch, once opened."""
        return f"{ident}.`branch_{self.branch}`" if ident in self._open else ident

    def open(self, ident: str, expected: int | None) -> str:
        """Create this run's branch of ``ident`` at ``main``'s snapshot, which must still be ``expected`` (the one the
        run read its offsets from), after removing other runs' branches; returns :meth:`target`."""
        if ident in self._open:
            return self.target(ident)
        table = self._table(ident)
        current = self._main(table)
        if current != expected:
            raise LakeFenceError(
                f"lake table {ident} was committed to (snapshot {current}) after this run read its offsets (from "
                f"snapshot {expected}): another run of the apply job (an orphaned spark-submit of a task that died, or "
                "a second apply started by hand) wrote it meanwhile. Nothing of this run was written to it; the next "
                "run reads the offsets again. If two applies run at once on purpose, stop one: only one may write a "
                "connector's lake."
            )
        stale = [
            name for name in table.refs().keySet() if str(name).startswith(BRANCH_PREFIX) and str(name) != self.branch
        ]
        if stale:
            remove = table.manageSnapshots()
            for name in stale:
                remove = remove.removeBranch(name)
            remove.commit()
        # a branch needs a snapshot: on a table without one Iceberg commits an empty one for it (not on main)
        manage = table.manageSnapshots()
        (manage.createBranch(self.branch) if current is None else manage.createBranch(self.branch, current)).commit()
        if stale:
            log.warning(
                "%s: removed the branch(es) %s of earlier runs of the apply job (a run that died, or one still running "
                "that can no longer publish)",
                ident,
                ", ".join(sorted(str(n) for n in stale)),
            )
        self._open.add(ident)
        return self.target(ident)

    def publish(self, ident: str) -> None:
        """Make this run's commits to ``ident`` the table's (fast-forward ``main`` to the branch, then drop the branch,
        in one commit); refused when anything else committed to ``main`` since :meth:`open`."""
        if ident not in self._open:
            return
        taken = self.taken_over(ident)
        if taken is not None:
            raise taken
        table = self._table(ident)
        try:
            table.manageSnapshots().fastForwardBranch(MAIN, self.branch).removeBranch(self.branch).commit()
        except Exception as exc:
            self.discard(ident)
            raise self._taken_over(ident, f"Iceberg refused to publish it: {_java_message(exc)}") from None
        self._open.discard(ident)

    def discard(self, ident: str) -> None:
        """Drop this run's branch of ``ident`` (best effort: a later run removes what is left)."""
        if ident not in self._open:
            return
        self._open.discard(ident)
        try:
            table = self._table(ident)
            if table.refs().get(self.branch) is not None:
                table.manageSnapshots().removeBranch(self.branch).commit()
        except Exception as exc:
            log.warning(
                "%s: could not remove this run's branch %s (%s); the next run removes it",
                ident,
                self.branch,
                _java_message(exc),
            )

    def taken_over(self, ident: str) -> LakeFenceError | None:
        """The error to raise instead of a failed write when this run's branch of ``ident`` is gone (a newer run
        removed it), else None."""
        if ident not in self._open:
            return None
        try:
            gone = self._table(ident).refs().get(self.branch) is None
        except Exception:
            return None
        if not gone:
            return None
        self._open.discard(ident)
        return self._taken_over(ident, "its branch was removed by a newer run")

    @staticmethod
    def _taken_over(ident: str, why: str) -> LakeFenceError:
        return LakeFenceError(
            f"lake table {ident}: this run's changes were not published ({why}): another run of the apply job "
            "committed to the table, or started, after this one read its offsets. The table holds what that run "
            "wrote, with its offsets; the next run continues from there."
        )


def _java_message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
