"""Where a stream batch resumes reading: past what an earlier batch produced, unless the server failed over.

A server crash can roll a logical slot back to its last saved position, behind where the previous batch advanced it
(the batch's state row is WAL-logged, the slot's advance is written to disk only at the next checkpoint or when its
restart point moves). What lies in between is in Kafka already, since the slot only moves after the flush: the batch
reads past it, as Debezium reads past what its offsets say it processed, rather than produce it again with a newer
``source.sequence``. After a failover the same positions hold other transactions, so nothing is skipped.
"""

from __future__ import annotations

import logging
from typing import Any

from walflow.source.lsn import Lsn

log = logging.getLogger("walflow.capture.stream")


def resume_point(
    connector: str, slot_name: str, slot_at: Lsn, previous_batch: dict[str, Any], timeline: int | None
) -> Lsn | None:
    """The position before which transactions are read past (their commits end before it), or ``None``.

    :param slot_at: the slot's confirmed position as the batch found it.
    :param previous_batch: the previous batch's record (``confirmed_to``, ``timeline``).
    :param timeline: the server's timeline now.
    """
    confirmed_to = previous_batch.get("confirmed_to")
    if not confirmed_to:
        return None
    left_at = Lsn.parse(confirmed_to)
    if left_at <= slot_at:
        return None
    if previous_batch.get("timeline") not in (None, timeline):
        # A promoted standby's slot (slot.failover: synchronized from the old primary) lags what the previous batch
        # confirmed there, and past the promotion the same positions hold other transactions: nothing is skipped,
        # so what lies in between is produced again (duplicates, never a gap).
        log.warning(
            "connector %s: the server is on timeline %s and the previous batch ran on timeline %s (a failover); "
            "slot %s is at %s, behind %s where the previous batch left it on the old primary: the transactions "
            "in between are streamed again (at-least-once duplicates, docs/operations.md)",
            connector, timeline, previous_batch.get("timeline"), slot_name, slot_at, confirmed_to,
        )  # fmt: skip
        return None
    log.warning(
        "connector %s: slot %s is at %s, behind %s where the previous batch left it (the server "
        "restarted without a checkpoint); the transactions in between are in Kafka already and are skipped",
        connector, slot_name, slot_at, confirmed_to,
    )  # fmt: skip
    return left_at
