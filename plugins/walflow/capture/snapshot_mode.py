"""Whether a connector's setup takes a snapshot, what a lost slot means, and the report of what setup did.

``snapshot.mode`` decides whether a snapshot runs (the reference's semantics, where "offsets" are walflow's
state table and slot):

- ``initial``: when no snapshot of this connector completed yet;
- ``always``: at every setup run;
- ``never`` / ``no_data``: never; streaming starts at the slot's creation;
- ``initial_only``: like ``initial``, then no streaming: the slot is dropped after the snapshot and stream
  runs skip;
- ``when_needed``: like ``initial``, and also when the slot is missing or has lost WAL (the only case in
  which walflow recreates a slot, because the user asked for it).

A slot that existed before (the state table records a completed or skipped snapshot) and is gone now means
changes may have been missed. Setup then refuses to go on, whatever the mode, except ``when_needed`` and
``always``, which re-read every table into a new slot (with a warning in the log). ``initial_only`` drops its
slot on purpose and never recreates it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from walflow.capture.snapshot import SnapshotSummary
from walflow.config.connector import ConnectorConfig
from walflow.errors import SlotError
from walflow.source.prepare import SetupReport

#: Snapshot states after which stream runs may have read the slot: losing the slot then may lose changes.
STREAMED_STATES = ("completed", "skipped")
#: Modes that re-read every table when the slot has to be created again, so nothing can be missed.
REREADING_MODES = ("when_needed", "always")


def lost_slot_error(config: ConnectorConfig, previous: dict[str, Any] | None) -> SlotError | None:
    """The error a setup run must stop with when the slot is missing, or ``None`` when creating it is safe.

    Creating it is safe when no stream run can have read the old slot (no snapshot state, or a snapshot that never
    completed: stream runs refuse to start until it does) and when the mode re-reads all data into the new slot.
    """
    status = (previous or {}).get("status")
    if status not in STREAMED_STATES or config.snapshot_mode in REREADING_MODES:
        return None
    if config.snapshot_mode == "initial_only" and status == "completed":
        return None  # dropped on purpose after the snapshot; never recreated (see ConnectorSetup.run)
    return SlotError(
        f"replication slot {config.slot_name!r} is gone although connector {config.name!r} has streamed from it "
        f"(snapshot state {status!r}): changes made since its last confirmed position may have been missed. walflow "
        f"never recreates a slot silently, and snapshot.mode={config.snapshot_mode!r} would not re-read the data. Set "
        "'snapshot.mode' to 'when_needed' (or 'always') and run the setup again to re-read the tables into a new slot."
    )


def snapshot_needed(config: ConnectorConfig, state: dict[str, Any] | None, slot_missing: bool) -> bool:
    """Whether this setup run takes a snapshot, given the last one's state and whether the slot is missing."""
    mode = config.snapshot_mode
    completed = state is not None and state.get("status") == "completed"
    if mode in ("never", "no_data"):
        return False
    if mode == "always":
        return True
    if mode == "when_needed":
        return not completed or slot_missing
    return not completed  # initial, initial_only


@dataclass(frozen=True)
class SnapshotOutcome:
    """The ``snapshot`` part of the setup report: why this run took no snapshot, or how the one it took went."""

    #: why no snapshot ran (when none did)
    reason: str | None = None
    #: the summary of the snapshot this run took (when one did)
    summary: SnapshotSummary | None = None

    @classmethod
    def skipped(cls, reason: str) -> SnapshotOutcome:
        return cls(reason=reason)

    @classmethod
    def taken(cls, summary: SnapshotSummary) -> SnapshotOutcome:
        return cls(summary=summary)

    @property
    def ran(self) -> bool:
        return self.summary is not None

    def as_dict(self) -> dict[str, Any]:
        if self.summary is not None:
            return {"ran": True, **self.summary.as_dict()}
        return {"ran": False, "reason": self.reason}


@dataclass(frozen=True)
class ConnectorSetupReport:
    """What a setup run found and did: the source's report (:class:`SetupReport`) and its ``snapshot`` part.

    :meth:`as_dict` is the setup task's XCom, and what :func:`walflow.capture.metrics.snapshot_metrics` reads: its keys
    are :class:`SetupReport`'s, then ``snapshot``.
    """

    source: SetupReport
    snapshot: SnapshotOutcome

    def as_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = self.source.as_dict()
        result["snapshot"] = self.snapshot.as_dict()
        return result
