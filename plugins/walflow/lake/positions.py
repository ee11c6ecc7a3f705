"""Positions: where an event sits in the source's commit order, and the Kafka offsets the lake has applied."""

from __future__ import annotations

from typing import Any

import orjson

from walflow.errors import RecordsDeletedError, TopicMismatchError


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def source_position(
    source: dict[str, Any], transaction: dict[str, Any] | None, op: str | None = None
) -> tuple[int, int, int]:
    """An event's place in the order the source committed its changes: ``(commit position, change LSN, order)``,
    from its ``source`` and ``transaction`` blocks and its ``op`` (see :func:`position`)."""
    sequence = source.get("sequence")
    if initial_snapshot_row(op, source.get("lsn"), sequence):
        sequence = None
    return position(source.get("lsn"), sequence, None if transaction is None else transaction.get("total_order"))


def initial_snapshot_row(op: Any, lsn: Any, sequence: Any) -> bool:
    """Whether an event is a row of an initial snapshot: op "r" with an LSN, and a sequence [null, LSN] that says
    no more than the LSN (an incremental snapshot's rows have no LSN: their sequence is their position)."""
    return op == "r" and lsn is not None and isinstance(sequence, str) and sequence.startswith("[null,")


def position(lsn: Any, sequence: Any, total_order: Any) -> tuple[int, int, int]:
    """An event's place in the order the source committed its changes: ``(commit position, change LSN, order)``,
    from ``source.lsn``, ``source.sequence`` and ``transaction.total_order``.

    Streamed events carry ``source.sequence`` = [LSN of the previous commit, this change's LSN]: the first grows
    from one transaction to the next in commit order and the second inside a transaction, so the commit position
    is the larger of the two (a change written before the previous commit, in a transaction that committed after
    it, still sorts after every change of that earlier transaction). ``transaction.total_order`` breaks ties
    between events of one WAL record when transaction metadata is on.

    An initial snapshot's rows (``op`` "r" with an LSN: callers pass no sequence for them, as their [null, LSN]
    says no more) sit at their ``source.lsn``, the slot's consistent point, before any change of that position. An
    incremental snapshot's rows carry no LSN: their sequence places them at the high watermark where they were
    emitted (DBLog: every change after the watermark is newer, the chunk dropped its rows changed before).

    The first transaction streamed after an initial snapshot has no previous commit ([null, L]), and L may lie
    before the consistent point (it wrote before the slot was consistent and committed after). The lake job
    replaces the null by that point, from the start fact (:attr:`walflow.lake.decoder.DecodePlan.first_commit`),
    so that the transaction sorts after the snapshot's rows.

    Only these fields are read, so fields a newer Debezium adds (``ts_us``, ``ts_ns``, ``origin``...) change
    nothing.
    """
    if type(lsn) is not int:  # the common case (an int) skips the conversion
        lsn = _int(lsn)
    order = 0 if total_order is None else _int(total_order)
    if sequence:
        # '["<previous>","<change>"]' as the stream writes it, without a JSON parse
        if type(sequence) is str and sequence[:2] == '["' and sequence[-2:] == '"]':
            parts = sequence[2:-2].split('","')
            if (
                len(parts) == 2
                and parts[0].isascii()
                and parts[0].isdigit()
                and parts[1].isascii()
                and parts[1].isdigit()
            ):
                previous_lsn, change_lsn = int(parts[0]), int(parts[1])
                return (previous_lsn if previous_lsn > change_lsn else change_lsn), change_lsn, order
        try:
            previous, change = orjson.loads(sequence) if isinstance(sequence, str) else sequence
        except (ValueError, TypeError):
            previous, change = None, None
        change_lsn = _int(change, lsn)
        return max(_int(previous), change_lsn), change_lsn, order
    return lsn, 0, order


def format_position(position: tuple[int, int, int]) -> str:
    """The text form stored in ``_walflow_position``: fixed-width hex, so text order is position order."""
    return f"{position[0]:016X}/{position[1]:016X}"


def parse_offsets(text: str | None) -> dict[str, dict[int, int]]:
    """The ``walflow.offsets`` snapshot property: ``{topic: {partition: next offset}}``."""
    if not text:
        return {}
    raw = orjson.loads(text)
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in raw.items()}


def format_offsets(offsets: dict[str, dict[int, int]]) -> str:
    return orjson.dumps(
        {topic: {str(p): o for p, o in sorted(parts.items())} for topic, parts in sorted(offsets.items())},
        option=orjson.OPT_SORT_KEYS,
    ).decode()


def offset_slices(
    slices: list[tuple[int, int, int]], parallelism: int, min_size: int = 20_000
) -> list[tuple[int, int, int]]:
    """Cut (partition, start, end) ranges into about ``parallelism`` pieces of at least ``min_size`` records, so
    that even a single-partition topic is read by every core."""
    total = sum(end - start for _p, start, end in slices)
    size = max(min_size, -(-total // max(parallelism, 1)))
    out = []
    for partition, start, end in slices:
        for begin in range(start, end, size):
            out.append((partition, begin, min(begin + size, end)))
    return out


def _start_over(connector: str) -> str:
    return (
        f"To start over: `walflow reset {connector} --lake`, then run {connector}__setup (a new snapshot refills the "
        "topics and the lake); or re-snapshot into a new lake namespace (walflow.lake.namespace)."
    )


def check_last_applied(
    topic: str, partition: int, offset: int, found: str, expected: str, table: str, connector: str
) -> str | None:
    """Check the record at ``offset``, the last the lake ``table`` applied from the partition, by its fingerprint.

    :param found: the fingerprint of the record there now ("" when there is none).
    :param expected: the fingerprint stored with the lake's offsets.
    :returns: None when it is the same record; a warning when it is gone, which retention (the partition now
        starts after it) and compaction (a later record of the same key replaced it) both do to a topic the lake
        read: nothing the lake still needs is lost by that, and :func:`check_offsets` sees a partition that is
        shorter than the lake's offsets or lost records it had not applied.
    :raises TopicMismatchError: another record is there: the topic was recreated or the broker lost its data.
    """
    if found == expected:
        return None
    if not found:
        return (
            f"topic {topic} partition {partition}: the record at offset {offset}, the last the lake table {table} "
            "applied, is no longer in the topic (deleted by retention or compaction), so the topic cannot be checked "
            "against it; its offsets still line up"
        )
    raise TopicMismatchError(
        f"topic {topic} partition {partition}: the record at offset {offset} is not the one the lake table {table} "
        f"applied there (fingerprint {found}, expected {expected}): the topic was recreated or the broker lost its "
        "data (the embedded broker keeps topics in memory only), so its offsets no longer line up with the lake's. "
        f"Nothing was skipped silently. {_start_over(connector)}"
    )


def check_offsets(
    topic: str, partition: int, start: int, applied: int, low: int, end: int, table: str, connector: str
) -> None:
    """Check that a partition still holds every record the lake ``table`` has to read from it.

    :param start: the first offset to read (the lowest the lake's tables applied up to).
    :param applied: the highest offset they applied up to.
    :param low: the partition's first offset still held (retention moves it).
    :param end: the partition's end offset.
    :raises TopicMismatchError: the partition ends below ``applied`` (recreated, or the broker lost its data).
    :raises RecordsDeletedError: records from ``start`` on were deleted before the lake read them: a read would start
        at ``low`` and skip them without a word.
    """
    if end < applied:
        raise TopicMismatchError(
            f"topic {topic} partition {partition} ends at offset {end}, below the offset {applied} the lake table "
            f"{table} already applied: the topic was recreated or the broker lost its data (the embedded broker keeps "
            f"topics in memory only). Nothing was skipped silently. {_start_over(connector)}"
        )
    if low > start:
        raise RecordsDeletedError(
            f"topic {topic} partition {partition} now starts at offset {low}, but the lake table {table} has applied "
            f"it only up to offset {start}: records {start} to {low - 1} were deleted (the topic's retention.ms or "
            "retention.bytes) before the lake read them. Nothing was skipped. Keep the topics' retention longer than "
            f"the time between two applies. {_start_over(connector)}"
        )


def share(budget: int, backlogs: dict[Any, int]) -> dict[Any, int]:
    """Split ``budget`` records among ``backlogs`` (key -> records waiting) fairly: every key gets an equal share,
    and what a key with a smaller backlog leaves goes to the others (water filling). Keys are served in their
    order for the remainder of a division, so the result is the same on every run."""
    given = dict.fromkeys(backlogs, 0)
    waiting = [k for k, n in backlogs.items() if n > 0]
    left = max(budget, 0)
    while waiting and left > 0:
        each = max(1, left // len(waiting))
        for key in list(waiting):
            take = min(each, backlogs[key] - given[key], left)
            given[key] += take
            left -= take
            if given[key] >= backlogs[key]:
                waiting.remove(key)
            if left == 0:
                break
    return given
