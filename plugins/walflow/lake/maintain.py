"""Lake maintenance (driver side): compaction, delete-file rewriting, snapshot expiry and orphan removal, keeping
what exactly once needs.

A merge-on-read table gains a position-delete file and small data files with every apply; reading it means
applying those deletes, so reads slow down and files pile up. Per lake table of the connector's namespace, one
run of :class:`LakeMaintenance`:

1. rewrites the data files that have deletes or are small (Iceberg's ``rewrite_data_files``: binpack, every file
   with a delete file is rewritten, so its deletes stop applying), then drops the delete files that apply to
   nothing any more;
2. rewrites the position-delete files that remain, if any (``rewrite_position_delete_files``; see
   :meth:`LakeMaintenance._rewrite_deletes` for the Iceberg 1.10 bug that makes this step rarely possible);
3. expires snapshots older than ``walflow.lake.maintain.snapshot.retention.hours``;
4. removes files no snapshot references that are older than ``walflow.lake.maintain.orphan.retention.hours``.

Exactly once depends on the Kafka offsets in the snapshot summaries (:mod:`walflow.lake.history`): the next apply
reads them from the newest snapshot of the current ancestry that has them. So both rewrites commit their snapshot
with the same offsets and fingerprints as the newest walflow snapshot (the data is the same rows, so the offsets
are still true) and walflow's mark, and the expiry always keeps every snapshot from the current one back to the
newest that carries offsets. Maintenance must not run while the connector's apply runs: the Airflow tasks of
both take the connector's lake lock (:func:`walflow.source.locks.lake_lock`).

The actions run through Iceberg's Java API (``SparkActions``), which, unlike the SQL procedures, lets a rewrite
put properties into its snapshot's summary.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import SparkSession

from walflow.errors import LakeError
from walflow.lake import columns as C
from walflow.lake.history import offsets_snapshot
from walflow.lake.settings import LakeSettings

log = logging.getLogger("walflow.maintain")
#: the step's name in the ``walflow.commit`` mark of a maintenance snapshot
MAINTAIN_COMMIT = "maintain"


@dataclass(frozen=True)
class Footprint:
    """A table's files: those its current snapshot reads, and how many snapshots it keeps."""

    data_files: int
    data_bytes: int
    delete_files: int
    delete_bytes: int
    snapshots: int

    def describe(self) -> str:
        return (
            f"{self.data_files} data file(s) ({_size(self.data_bytes)}), {self.delete_files} delete file(s) "
            f"({_size(self.delete_bytes)}), {self.snapshots} snapshot(s)"
        )


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


class LakeMaintenance:
    """One maintenance run over the lake tables of a connector's namespace.

    :param spark: a session with the lake's catalog and Iceberg's extensions.
    :param settings: the connector's lake settings (catalog, namespace, retention hours).
    :param now_ms: the clock in epoch milliseconds (tests pass it; default the wall clock).
    """

    def __init__(self, spark: SparkSession, settings: LakeSettings, now_ms: int | None = None) -> None:
        self.spark = spark
        self.settings = settings
        self.now_ms = now_ms if now_ms is not None else int(time.time() * 1000)

    def tables(self) -> list[str]:
        """The tables of the connector's namespace (every lake table of the connector, changelogs included)."""
        namespace = self.settings.namespace_ident()
        # asked first rather than read from SHOW TABLES' error, whose wording differs between catalogs (the Hadoop
        # catalog's is "Namespace does not exist") and which another failure could resemble
        if not self.spark.catalog.databaseExists(namespace):
            log.info("lake namespace %s does not exist yet (no apply has run): nothing to maintain", namespace)
            return []
        return sorted(r["tableName"] for r in self.spark.sql(f"SHOW TABLES IN {namespace}").collect())

    def run(self) -> list[dict[str, Any]]:
        """Maintain every table; a table that cannot be maintained is reported and the others still are, then the
        run fails naming it."""
        results, failures = [], []
        tables = self.tables()
        log.info("maintaining %d lake table(s) of %s", len(tables), self.settings.namespace_ident())
        for name in tables:
            try:
                results.append(self.maintain(name))
            except LakeError as exc:
                log.error("%s: not maintained: %s", name, exc)
                failures.append((name, exc))
        if failures:
            raise LakeError(
                f"{len(failures)} lake table(s) could not be maintained (the others were): "
                + "; ".join(f"{name}: {exc}" for name, exc in failures)
            )
        return results

    def footprint(self, ident: str) -> Footprint:
        files = self.spark.sql(
            f"SELECT content, count(*) AS n, coalesce(sum(file_size_in_bytes), 0) AS bytes FROM {ident}.files GROUP BY "
            "content"
        ).collect()
        by_content = {r["content"]: (int(r["n"]), int(r["bytes"])) for r in files}
        data = by_content.get(0, (0, 0))
        deletes = tuple(a + b for a, b in zip(by_content.get(1, (0, 0)), by_content.get(2, (0, 0))))
        snapshots = int(self.spark.sql(f"SELECT count(*) FROM {ident}.snapshots").collect()[0][0])
        return Footprint(data[0], data[1], deletes[0], deletes[1], snapshots)

    def _drop_dangling_deletes(self, ident: str, table: Any, carried: dict[str, str]) -> int:
        """Remove the delete files that apply to no live data file, in one commit carrying ``carried``.

        A position delete applies only to data files whose data sequence number is not above its own (an equality
        delete: below it). Iceberg's own ``remove-dangling-deletes`` leaves unpartitioned tables to the commit's
        manifest filtering, which kept them here (measured: every delete file of a rewritten table stayed), so
        walflow finds them by that rule and removes them itself.
        """
        entries = self.spark.sql(
            "SELECT data_file.content AS content, data_file.file_path AS path, sequence_number AS seq FROM "
            f"{ident}.entries WHERE status < 2"
        ).collect()
        data = [r["seq"] for r in entries if r["content"] == 0]
        lowest = min(data) if data else None
        dangling = {
            r["path"]
            for r in entries
            if (r["content"] == 1 and (lowest is None or r["seq"] < lowest))
            or (r["content"] == 2 and (lowest is None or r["seq"] <= lowest))
        }
        if not dangling:
            return 0
        jvm: Any = self.spark._jvm
        snapshot = table.currentSnapshot()
        change = table.newRewrite().validateFromSnapshot(snapshot.snapshotId())
        found = 0
        for manifest in snapshot.deleteManifests(table.io()):
            reader = jvm.org.apache.iceberg.ManifestFiles.readDeleteManifest(manifest, table.io(), table.specs())
            try:
                files = reader.iterator()
                while files.hasNext():
                    delete_file = files.next()
                    if delete_file.location() in dangling:
                        change.deleteFile(delete_file.copy())
                        found += 1
            finally:
                reader.close()
        for key, value in carried.items():
            change.set(key, value)
        change.commit()
        log.info("%s: dropped %d delete file(s) that apply to no live data file", ident, found)
        return found

    def _rewrite_deletes(self, ident: str, actions: Any, table: Any, carried: dict[str, str]) -> dict[str, Any]:
        """Compact the delete files the data-file rewrite left (none, unless a rewrite group failed).

        Iceberg 1.10's ``rewrite_position_delete_files`` fails on tables with a map or array column
        (``ValidationException: Invalid partition field parent``, apache/iceberg#14619, fixed after 1.10), and every
        lake table has one (``_walflow_overflow``); the data-file rewrite above removes the delete files anyway. So
        it runs only when delete files remain, and that failure leaves them for the next run, with a warning.
        """
        remaining = self.footprint(ident).delete_files
        if remaining == 0:
            log.info("%s: rewrite_position_delete_files: no delete file left to rewrite", ident)
            return {"rewritten_delete_files": 0, "added_delete_files": 0}
        table.refresh()
        deletes = actions.rewritePositionDeletes(table).option("rewrite-all", "true")
        for key, value in carried.items():
            deletes = deletes.snapshotProperty(key, value)
        try:
            done = deletes.execute()
        except Exception as exc:
            if "Invalid partition field parent" not in str(exc):
                raise
            log.warning(
                "%s: rewrite_position_delete_files cannot run on this table (Iceberg 1.10 fails on tables with map or "
                "array columns, apache/iceberg#14619): its %d delete file(s) stay until their data files are "
                "rewritten",
                ident,
                remaining,
            )
            return {"rewritten_delete_files": 0, "added_delete_files": 0, "skipped": "apache/iceberg#14619"}
        log.info(
            "%s: rewrite_position_delete_files rewrote %d delete file(s) into %d",
            ident,
            done.rewrittenDeleteFilesCount(),
            done.addedDeleteFilesCount(),
        )
        return {
            "rewritten_delete_files": done.rewrittenDeleteFilesCount(),
            "added_delete_files": done.addedDeleteFilesCount(),
        }

    def maintain(self, name: str) -> dict[str, Any]:
        """Compact, rewrite deletes, expire and clean one table; returns its footprint before and after and what
        each step did."""
        s = self.settings
        ident = s.ident(name)
        started = time.monotonic()
        found = offsets_snapshot(self.spark, ident, (s.catalog, s.namespace, name))
        before = self.footprint(ident)
        log.info("%s before: %s", ident, before.describe())
        # the rewrites' snapshots carry the offsets of the newest walflow snapshot: the next apply reads them there
        carried = {C.COMMIT_PROPERTY: MAINTAIN_COMMIT}
        if found is not None:
            summary = found[1]
            carried[C.OFFSETS_PROPERTY] = summary[C.OFFSETS_PROPERTY]
            if summary.get(C.FINGERPRINTS_PROPERTY):
                carried[C.FINGERPRINTS_PROPERTY] = summary[C.FINGERPRINTS_PROPERTY]
        jvm: Any = self.spark._jvm
        jspark = self.spark._jsparkSession
        actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(jspark)
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(jspark, ident)
        steps: dict[str, Any] = {}

        # Every data file with a delete file is rewritten (its deletes applied). The new files take the rewrite's
        # own sequence number, not the one the rewrite started from (the default, which lets concurrent deletes
        # commit meanwhile; the lake lock keeps every other writer of these tables out), so that every older
        # delete file then applies to nothing and can be dropped (below).
        rewrite = (
            actions.rewriteDataFiles(table)
            .option("delete-file-threshold", "1")
            .option("use-starting-sequence-number", "false")
        )
        for key, value in carried.items():
            rewrite = rewrite.snapshotProperty(key, value)
        done = rewrite.execute()
        steps["rewrite_data_files"] = {
            "rewritten_data_files": done.rewrittenDataFilesCount(),
            "added_data_files": done.addedDataFilesCount(),
            "rewritten_bytes": done.rewrittenBytesCount(),
            "removed_delete_files": done.removedDeleteFilesCount(),
        }
        log.info(
            "%s: rewrite_data_files rewrote %d data file(s) into %d",
            ident,
            done.rewrittenDataFilesCount(),
            done.addedDataFilesCount(),
        )

        table.refresh()
        steps["drop_dangling_deletes"] = {"removed_delete_files": self._drop_dangling_deletes(ident, table, carried)}
        steps["rewrite_position_delete_files"] = self._rewrite_deletes(ident, actions, table, carried)

        # Snapshots from the current one back to the newest with offsets stay, whatever their age: the next apply
        # reads its offsets there (after the rewrites above that is the current snapshot itself).
        table.refresh()
        keep = 1
        found_now = offsets_snapshot(self.spark, ident, (s.catalog, s.namespace, name))
        if found_now is not None:
            keep = found_now[0] + 1
        older_than = self.now_ms - int(s.snapshot_retention_hours * 3_600_000)
        done = actions.expireSnapshots(table).expireOlderThan(older_than).retainLast(keep).execute()
        steps["expire_snapshots"] = {
            "deleted_data_files": done.deletedDataFilesCount(),
            "deleted_delete_files": done.deletedPositionDeleteFilesCount() + done.deletedEqualityDeleteFilesCount(),
            "deleted_manifests": done.deletedManifestsCount(),
            "retained_last": keep,
        }
        log.info(
            "%s: expire_snapshots (older than %.0f h, the last %d kept) deleted %d data and %d delete file(s)",
            ident,
            s.snapshot_retention_hours,
            keep,
            done.deletedDataFilesCount(),
            steps["expire_snapshots"]["deleted_delete_files"],
        )

        table.refresh()
        orphans = (
            actions.deleteOrphanFiles(table)
            .olderThan(self.now_ms - int(s.orphan_retention_hours * 3_600_000))
            .execute()
        )
        removed, files = 0, orphans.orphanFileLocations().iterator()
        while files.hasNext():
            log.info("%s: removed orphan file %s", ident, files.next())
            removed += 1
        steps["remove_orphan_files"] = {"removed_files": removed}
        log.info(
            "%s: remove_orphan_files (older than %.0f h) removed %d file(s)", ident, s.orphan_retention_hours, removed
        )

        after = self.footprint(ident)
        log.info("%s after: %s (%.1f s)", ident, after.describe(), time.monotonic() - started)
        return {
            "table": ident,
            "before": asdict(before),
            "after": asdict(after),
            "steps": steps,
            "seconds": round(time.monotonic() - started, 2),
        }
