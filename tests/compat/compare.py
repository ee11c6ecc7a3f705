"""Record-by-record comparison of walflow's and Debezium's output, field by field.

Both sides' records are parsed from the bytes a Kafka consumer sees (key, value, headers) and compared per topic,
in order (each topic has one partition, so this is also the order per key; a snapshot taken by several threads
is compared in key order, the order per key being all it promises). JSON objects are compared with their
key order and values with their JSON type (``1`` is not ``1.0``).

Only these are set aside before comparing, each for a stated reason:

* processing timestamps: the envelope's ``ts_ms``/``ts_us``/``ts_ns`` (the time the connector handled the
  event), a heartbeat's ``ts_ms``, and the ``__debezium.context.runId`` header (an id per connector run; it must be
  present and look like a UUID on both sides);
* values that belong to each connector's own slot and snapshot, not to the data: an initial snapshot's
  ``source.lsn``, ``source.txId`` and ``source.sequence`` (each connector's slot has its own consistent point and
  its own snapshot transaction; they must be the same on every record of one side's snapshot) and its
  ``source.ts_*`` (when the rows were read); an incremental snapshot's ``source`` position and times (where each
  connector's own watermark window closed);
* records of the other connector's bookkeeping tables (walflow's state table, each side's signal table), which
  exist in the database only because the two run side by side.

Everything else that differs must be one of the :data:`DELIBERATE` differences, which docs/events.md's table
"Differences from Debezium" lists; each is applied by a named rule whose uses are counted, so a test can assert
that the difference it documents is really the one seen.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.compat.debezium import Rec
from tests.compat.harness import SENTINEL, Outcome

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_MESSAGE_ID = re.compile(
    r"^io\.debezium\.connector\.postgresql\.LogicalDecodingMessageMonitor\$LogicalDecodingMessageId@[0-9a-f]+$"
)

#: The deliberate differences, by rule name (docs/events.md's table "Differences from Debezium" explains each).
DELIBERATE = {
    "incremental-keyless": "an incremental snapshot of a table without a key (by surrogate-key): Debezium keeps "
    "one row per chunk, since it buffers a chunk's rows by their event key, null for all of them; walflow emits "
    "every row",
    "multi-dimensional-arrays": "an array value with more than one dimension: Debezium emits a flat array of nulls "
    "(or of Java array names such as '[Ljava.lang.String;@1b6d3586'); walflow keeps the values, nested once per "
    "declared dimension (a value with more dimensions than its column declares is flattened)",
    "debezium-signal-table-events": "Debezium captures its own signal table (signals and its watermark rows, which "
    "its END records count too); walflow reads its signal table without emitting it and keeps its watermarks out "
    "of the table",
    "heartbeat-count": "Debezium emits a heartbeat every heartbeat.interval.ms; walflow one per stream batch",
    "message-id-hash": "the END record of a transaction with a logical decoding message names it by a Java "
    "identity hash code, which differs between runs of Debezium itself",
    "walflow-bookkeeping": "a transaction that only wrote walflow's state table (a batch's position, a claim): "
    "walflow emits no BEGIN/END for it, as Debezium, which keeps its offsets outside the database, never has such "
    "transactions; the Debezium beside it here reads them and emits a pair",
}


#: What the harness itself sets aside (not a difference of the connectors): Debezium's records from before walflow's
#: slot existed (it read walflow's own earlier bookkeeping); the order across keys of a snapshot taken by several
#: threads, which neither connector promises (seen to vary between runs).
HARNESS_RULES = {"before-walflow-slot", "snapshot-thread-order"}


def _forget_commit_before(rec: Parsed, lsn: int) -> bool:
    """Null the first element of a change's ``source.sequence`` when it names a commit before ``lsn``."""
    payload = rec.payload()
    source = payload.get("source") if isinstance(payload, dict) else None
    sequence = source.get("sequence") if isinstance(source, dict) else None
    if not isinstance(sequence, str) or source.get("snapshot") not in (None, "false"):
        return False
    try:
        first, last = orjson.loads(sequence)
    except (orjson.JSONDecodeError, ValueError, TypeError):
        return False
    if first is None or int(first) >= lsn:
        return False
    source["sequence"] = orjson.dumps([None, last]).decode()
    return True


@dataclass
class Parsed:
    topic: str
    key: Any
    value: Any
    headers: list[tuple[str, Any]]

    def payload(self) -> Any:
        v = self.value
        if isinstance(v, dict) and "schema" in v and "payload" in v and len(v) == 2:
            return v["payload"]
        return v


@dataclass
class Comparison:
    """The result: per topic record counts and the differences found (empty when identical)."""

    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)
    rules: Counter[str] = field(default_factory=Counter)
    error: str | None = None

    @property
    def walflow_records(self) -> int:
        return sum(w for w, _ in self.counts.values())

    @property
    def debezium_records(self) -> int:
        return sum(d for _, d in self.counts.values())


def _loads(data: bytes | None) -> Any:
    return None if data is None else orjson.loads(data)


def parse(rec: Rec) -> Parsed:
    return Parsed(rec.topic, _loads(rec.key), _loads(rec.value), [(k, _loads(v)) for k, v in rec.headers])


def _is_tx(parsed: Parsed) -> bool:
    """A transaction metadata record (BEGIN or END), whatever its topic (``topic.transaction``)."""
    p = parsed.payload() if parsed.value is not None else None
    return isinstance(p, dict) and p.get("status") in ("BEGIN", "END") and "data_collections" in p


def _tx_xid(parsed: Parsed) -> int | None:
    """The transaction id of a BEGIN or END record (its ``id`` is ``<txId>:<LSN>``)."""
    text = str((_payload_dict(parsed) or {}).get("id", "")).partition(":")[0]
    return int(text) if text.isdigit() else None


def _payload_dict(parsed: Parsed) -> dict[str, Any] | None:
    p = parsed.payload()
    return p if isinstance(p, dict) else None


_PROCESSING = ("ts_ms", "ts_us", "ts_ns")


_JAVA_ARRAY_NAME = re.compile(r"^\[L[\w.$]+;@[0-9a-f]+$")


def _set_aside_multidim(parsed: Parsed, side: str, columns: set[str], problems: list[str], rules: Counter[str]) -> None:
    """multi-dimensional-arrays: the columns that hold arrays of more than one dimension, in schema and values.

    Debezium's values of such a column must be what it makes of them (lists of nulls or of Java array names), so a
    real difference in other arrays is never hidden."""
    payload = _payload_dict(parsed)
    source = payload.get("source") if payload else None
    if not isinstance(source, dict):
        return
    table = f"{source.get('schema')}.{source.get('table')}"
    names = {c.rsplit(".", 1)[1] for c in columns if c.rsplit(".", 1)[0] == table}
    if not names:
        return
    for image in ("before", "after"):
        row = payload.get(image)
        if not isinstance(row, dict):
            continue
        for name in names:
            value = row.get(name)
            if side == "debezium" and value is not None:
                if not all(v is None or (isinstance(v, str) and _JAVA_ARRAY_NAME.match(v)) for v in value):
                    problems.append(
                        f"{parsed.topic}: Debezium's {image}.{name} is {_short(value)},"
                        " not a multi-dimensional array it lost"
                    )
                    continue
                rules["multi-dimensional-arrays"] += 1
            if name in row:
                row[name] = "<multi-dimensional array>"
    schema = parsed.value.get("schema") if isinstance(parsed.value, dict) else None
    for image_schema in (schema or {}).get("fields", []):
        if image_schema.get("field") in ("before", "after"):
            for column in image_schema.get("fields", []):
                if column.get("field") in names:
                    column.clear()
                    column["field"] = "<multi-dimensional array>"


_NOTIFICATION = "io.debezium.connector.common.Notification"


def _normalise_notification(parsed: Parsed, side: str, problems: list[str]) -> bool:
    """A notification's timestamp is its processing time; an initial snapshot's id a new UUID (an incremental
    snapshot's is its signal's id, which the harness gives both connectors alike)."""
    schema = parsed.value.get("schema") if isinstance(parsed.value, dict) else None
    if not isinstance(schema, dict) or schema.get("name") != _NOTIFICATION:
        return False
    payload = parsed.value["payload"]
    payload["timestamp"] = "<processing time>"
    # additional_data is a HashMap copied from a Map.of, whose iteration order Java draws anew in each JVM: the keys
    # that share a bucket come in either order, in Debezium's own runs too
    if isinstance(payload.get("additional_data"), dict):
        payload["additional_data"] = dict(sorted(payload["additional_data"].items()))
    if payload.get("aggregate_type") == "Initial Snapshot":
        if not _UUID.match(str(payload.get("id"))):
            problems.append(f"{side}: notification id {payload.get('id')!r} is not a UUID")
        payload["id"] = "<uuid>"
        if isinstance(parsed.key, dict) and isinstance(parsed.key.get("payload"), dict):
            parsed.key["payload"]["id"] = "<uuid>"
    return True


def _normalise(parsed: Parsed, side: str, problems: list[str]) -> None:
    if _normalise_notification(parsed, side, problems):
        return
    payload = _payload_dict(parsed)
    if payload is not None:
        if "op" in payload:
            for key in _PROCESSING:
                if payload.get(key) is not None:
                    payload[key] = "<processing time>"
        elif parsed.topic.startswith("__debezium-heartbeat") and "ts_ms" in payload:
            payload["ts_ms"] = "<processing time>"
        source = payload.get("source")
        if isinstance(source, dict):
            marker = source.get("snapshot")
            if marker not in (None, "false"):
                for key in _PROCESSING:
                    if source.get(key) is not None:
                        source[key] = "<snapshot read time>"
                for key in ("lsn", "txId", "sequence"):
                    if source.get(key) is not None:
                        source[key] = f"<{'window' if marker == 'incremental' else 'snapshot'} {key}>"
        if _is_tx(parsed):
            for item in payload.get("data_collections") or []:
                if (
                    isinstance(item, dict)
                    and isinstance(item.get("data_collection"), str)
                    and _MESSAGE_ID.match(item["data_collection"])
                ):
                    item["data_collection"] = "<message id>"
    for i, (key, value) in enumerate(parsed.headers):
        if key == "__debezium.context.runId":
            text = value.get("payload") if isinstance(value, dict) else value
            if not (isinstance(text, str) and _UUID.match(text)):
                problems.append(f"{side}: header {key} is {value!r}, not a UUID")
            value = {**value, "payload": "<run id>"} if isinstance(value, dict) else "<run id>"
            parsed.headers[i] = (key, value)


def _snapshot_positions(records: list[Parsed]) -> set[tuple[Any, Any, Any]]:
    out = set()
    for rec in records:
        p = _payload_dict(rec)
        source = p.get("source") if p else None
        if isinstance(source, dict) and source.get("snapshot") not in (None, "false", "incremental"):
            out.add((source.get("lsn"), source.get("txId"), source.get("sequence")))
    return out


def diff(a: Any, b: Any, path: str = "", limit: int = 12) -> str | None:
    """Where ``a`` (walflow) and ``b`` (Debezium) differ (up to ``limit`` places, ``; ``-separated), or ``None``;
    strict on JSON types and on the order of object keys."""
    found: list[str] = []
    _diff(a, b, path, found, limit)
    return "; ".join(found) if found else None


def _diff(a: Any, b: Any, path: str, found: list[str], limit: int) -> None:
    if len(found) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            if set(a) != set(b):
                found.append(
                    f"{path or '/'}: only walflow has {sorted(set(a) - set(b))},"
                    f" only Debezium {sorted(set(b) - set(a))}"
                )
                return
            found.append(f"{path or '/'}: keys {list(a)} != {list(b)}")
        for k in a:
            _diff(a[k], b[k], f"{path}/{k}", found, limit)
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            names_a = [x.get("field") for x in a if isinstance(x, dict)]
            names_b = [x.get("field") for x in b if isinstance(x, dict)]
            if any(names_a) or any(names_b):
                found.append(
                    f"{path or '/'}: fields only walflow has {[n for n in names_a if n not in names_b]},"
                    f" only Debezium {[n for n in names_b if n not in names_a]}"
                )
            else:
                found.append(f"{path or '/'}: {len(a)} items != {len(b)}: {_short(a)} != {_short(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            label = x.get("field") if isinstance(x, dict) and isinstance(x.get("field"), str) else i
            _diff(x, y, f"{path}[{label}]", found, limit)
        return
    if type(a) is not type(b) or a != b:
        found.append(f"{path or '/'}: {_short(a)} != {_short(b)}")


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= 300 else text[:300] + "…"


def _label(rec: Parsed) -> str:
    p = _payload_dict(rec)
    op = p.get("op") if p else None
    key = rec.key.get("payload") if isinstance(rec.key, dict) and "payload" in rec.key else rec.key
    return f"key={_short(key)} op={op if rec.value is not None else 'tombstone'}"


def until_sentinel(records: list[Parsed]) -> list[Parsed]:
    """The records up to the workload's end marker (the sentinel message and its transaction's END): what either
    connector read after it (the other's bookkeeping, written once the workload was over) is not compared.

    ``records`` are in the order each connector produced them (walflow's per topic, in topic order), so this
    finds the marker's transaction and drops, per topic, the records that follow its position."""
    sentinel_tx = None
    for rec in records:
        p = _payload_dict(rec)
        if rec.topic.endswith(".message") and p and (p.get("message") or {}).get("prefix") == SENTINEL:
            sentinel_tx = (p.get("source") or {}).get("txId")
            sentinel_lsn = (p.get("source") or {}).get("lsn")
            break
    else:
        return records
    out: list[Parsed] = []
    for rec in records:
        p = _payload_dict(rec)
        if _is_tx(rec) and p:
            xid, _, lsn = str(p.get("id", "")).partition(":")
            if int(lsn or 0) > sentinel_lsn and xid != str(sentinel_tx):
                continue
        elif p and isinstance(p.get("source"), dict) and p["source"].get("snapshot") in (None, "false"):
            lsn = p["source"].get("lsn")
            if lsn is not None and lsn > sentinel_lsn:
                continue
        out.append(rec)
    return out


def _before(rec: Parsed, lsn: int) -> bool:
    """Whether a streamed record (a transaction record or a change) lies before ``lsn``."""
    p = _payload_dict(rec)
    if not p:
        return False
    if _is_tx(rec):
        # a BEGIN of a transaction replayed from a replication origin has LSN 0: its END decides
        tx_lsn = int(str(p.get("id", "0:0")).partition(":")[2] or 0)
        return 0 < tx_lsn < lsn
    source = p.get("source")
    if isinstance(source, dict) and source.get("snapshot") in (None, "false") and source.get("lsn") is not None:
        return source["lsn"] < lsn
    return False


def compare(outcome: Outcome) -> Comparison:
    result = Comparison(error=outcome.error)
    problems: list[str] = []
    internal_topics = {f"{outcome.prefix}.{t}" for t in outcome.internal_tables}
    sides: dict[str, list[Parsed]] = {}
    for side, records in (("walflow", outcome.walflow), ("debezium", outcome.debezium)):
        parsed = []
        for rec in records:
            if rec.topic in internal_topics:
                if side == "debezium" and rec.topic.startswith(f"{outcome.prefix}.dbz_internal.dbz_signal_"):
                    result.rules["debezium-signal-table-events"] += 1
                continue
            parsed.append(parse(rec))
        parsed = until_sentinel(parsed)
        if outcome.multidim:
            for rec in parsed:
                _set_aside_multidim(rec, side, outcome.multidim, problems, result.rules)
        if side == "debezium":
            for rec in parsed:
                # debezium-signal-table-events: the signal table's events counted in a transaction's END record
                p = _payload_dict(rec)
                items = p.get("data_collections") if p and _is_tx(rec) else None
                if items:
                    own = [i for i in items if str(i.get("data_collection", "")).startswith("dbz_internal.dbz_signal_")]
                    if own:
                        p["data_collections"] = [i for i in items if i not in own]
                        p["event_count"] -= sum(i["event_count"] for i in own)
                        result.rules["debezium-signal-table-events"] += len(own)
        if side == "debezium" and outcome.walflow_bookkeeping:
            kept = [r for r in parsed if not (_is_tx(r) and _tx_xid(r) in outcome.walflow_bookkeeping)]
            result.rules["walflow-bookkeeping"] += len(parsed) - len(kept)
            parsed = kept
        if side == "debezium" and outcome.walflow_start_lsn is not None:
            kept = [r for r in parsed if not _before(r, outcome.walflow_start_lsn)]
            result.rules["before-walflow-slot"] += len(parsed) - len(kept)
            parsed = kept
            # source.sequence names the last commit read before the event: one from before walflow's slot existed
            # (a DBA's statement between the two slots' creation) is one walflow never read, and its null there
            result.rules["before-walflow-slot"] += sum(
                _forget_commit_before(r, outcome.walflow_start_lsn) for r in parsed
            )
        positions = _snapshot_positions(parsed)
        if len(positions) > 1:
            problems.append(
                f"{side}: the initial snapshot's records carry {len(positions)} different positions:"
                f" {sorted(map(str, positions))}"
            )
        for rec in parsed:
            _normalise(rec, side, problems)
        sides[side] = parsed
    by_topic: dict[str, dict[str, list[Parsed]]] = defaultdict(lambda: {"walflow": [], "debezium": []})
    for side, records in sides.items():
        for rec in records:
            by_topic[rec.topic][side].append(rec)
    for topic in sorted(by_topic):
        wf, dbz = by_topic[topic]["walflow"], by_topic[topic]["debezium"]
        result.counts[topic] = (len(wf), len(dbz))
        if topic.startswith("__debezium-heartbeat") and wf and dbz:
            # heartbeat-count: the format must match, the number of heartbeats may not
            if len(wf) != len(dbz):
                result.rules["heartbeat-count"] += abs(len(wf) - len(dbz))
            wf, dbz = wf[:1], dbz[:1]
        if any(_is_tx(r) for r in (*wf, *dbz)):
            for rec in (*wf, *dbz):
                p = _payload_dict(rec)
                items = p.get("data_collections") if p else None
                if items and any(i.get("data_collection") == "<message id>" for i in items):
                    # message-id-hash: the message's name decides its place in the HashMap order, so compare
                    # the collections in a fixed order
                    items.sort(key=lambda i: (i["data_collection"], i["event_count"]))
                    if rec in dbz:
                        result.rules["message-id-hash"] += 1
        if any(_keyless_incremental(r) for r in dbz):
            # incremental-keyless: each of Debezium's rows must be among walflow's; walflow's others are set aside
            dbz_rows = [r for r in dbz if _keyless_incremental(r)]
            wf_rows = [r for r in wf if _keyless_incremental(r)]
            wf_afters = [_payload_dict(r)["after"] for r in wf_rows]  # type: ignore[index]
            for r in dbz_rows:
                if _payload_dict(r)["after"] not in wf_afters:  # type: ignore[index]
                    problems.append(
                        f"{topic}: Debezium's incremental row {_short(_payload_dict(r)['after'])}"
                        " is not among walflow's"
                    )  # type: ignore[index]
            kept = {
                id(r) for r in wf_rows if _payload_dict(r)["after"] in [_payload_dict(d)["after"] for d in dbz_rows]
            }  # type: ignore[index]
            result.rules["incremental-keyless"] += len(wf_rows) - len(kept)
            wf = [r for r in wf if not _keyless_incremental(r) or id(r) in kept]
            dbz = list(dbz)
        if outcome.parallel_snapshot:
            # snapshot-thread-order: with several snapshot threads neither connector promises an order across the
            # rows of a table, only per key (what a keyed consumer sees), so the rows are compared in key order
            before = [id(r) for r in dbz]
            wf, dbz = _snapshot_rows_by_key(wf), _snapshot_rows_by_key(dbz)
            if [id(r) for r in dbz] != before:
                result.rules["snapshot-thread-order"] += 1
        for i in range(max(len(wf), len(dbz))):
            if i >= len(wf):
                problems.append(f"{topic}[{i}]: only Debezium has {_label(dbz[i])}")
                continue
            if i >= len(dbz):
                problems.append(f"{topic}[{i}]: only walflow has {_label(wf[i])}")
                continue
            a, b = wf[i], dbz[i]
            for part, x, y in (("key", a.key, b.key), ("value", a.value, b.value), ("headers", a.headers, b.headers)):
                found = diff(_pairs(x) if part == "headers" else x, _pairs(y) if part == "headers" else y)
                if found:
                    problems.append(f"{topic}[{i}] ({_label(b)}) {part} {found}")
    result.differences = problems
    return result


def _snapshot_rows_by_key(records: list[Parsed]) -> list[Parsed]:
    """``records`` with the initial snapshot's rows sorted by key in the places they hold (stable, so rows of one
    key keep their order); every other record stays where it is."""

    def initial(rec: Parsed) -> bool:
        p = _payload_dict(rec)
        return (
            bool(p)
            and p.get("op") == "r"
            and (p.get("source") or {}).get("snapshot") not in (None, "false", "incremental")
        )

    places = [i for i, r in enumerate(records) if initial(r)]
    rows = sorted((records[i] for i in places), key=lambda r: _short(r.key))
    out = list(records)
    for i, rec in zip(places, rows):
        out[i] = rec
    return out


def _keyless_incremental(rec: Parsed) -> bool:
    p = _payload_dict(rec)
    return (
        bool(p) and rec.key is None and p.get("op") == "r" and (p.get("source") or {}).get("snapshot") == "incremental"
    )


def _pairs(headers: list[tuple[str, Any]]) -> list[list[Any]]:
    return [[k, v] for k, v in headers]


def report(name: str, comparison: Comparison, limit: int = 40) -> str:
    lines = [f"{name}: walflow {comparison.walflow_records} record(s), Debezium {comparison.debezium_records}"]
    for topic, (w, d) in comparison.counts.items():
        lines.append(f"  {topic}: walflow {w}, Debezium {d}")
    for problem in comparison.differences[:limit]:
        lines.append(f"  DIFF {problem}")
    if len(comparison.differences) > limit:
        lines.append(f"  … and {len(comparison.differences) - limit} more")
    return "\n".join(lines)
