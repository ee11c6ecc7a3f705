"""Values Spark and Iceberg cannot hold, and what the lake stores instead (docs/lake.md: "Value representations").

The converters of :mod:`walflow.lake.types` give every temporal value as an integer (microseconds or days since
the epoch), so a value outside the range Python, Spark and most readers accept never raises on the way in. When
a column of a batch holds such a value, :func:`column_array` fits it:

- timestamps and dates outside 0001-01-01 .. 9999-12-31 (Spark's documented range), ``infinity`` and
  ``-infinity`` included, are clamped to the nearest end of that range;
- an integer beyond 64 bits (a huge ``interval`` in microseconds) is clamped to the long range;
- a value Arrow still refuses becomes null;

and in each case the column's exact source value, as text, goes into the row's ``_walflow_overflow`` map under
the column's name. ``infinity`` keeps sorting after every real timestamp and ``-infinity`` before, so range
queries (``valid_to > now()``) still read right, and nothing of the source is lost.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from walflow.records.decimals import EXACT, int_to_decimal
from walflow.records.temporal import civil_to_days, days_to_civil

#: Debezium's fixed numbers for 'infinity' / '-infinity' timestamps, in every mode and precision (docs/lake.md,
#: "Type mappings"); PostgreSQL's JDBC driver's PGStatement.DATE_POSITIVE_INFINITY / DATE_NEGATIVE_INFINITY
TS_POS_INF = 9223372036825200000
TS_NEG_INF = -9223372036832400000
#: the same in millisecond fields (``Timestamp`` of precision 0-3, and the connect mode), as Debezium 3.6 sends them
TS_POS_INF_MS = TS_POS_INF // 1000
TS_NEG_INF_MS = -(-TS_NEG_INF // 1000)
#: the lake's day numbers for 'infinity' / '-infinity' dates (the int32 range's ends, so they clamp to the right end
#: of Spark's range); also what walflow's ``pre-2.6`` event format sends
DATE_POS_INF = 2**31 - 1
DATE_NEG_INF = -(2**31)
#: what Debezium 3.6 sends for 'infinity' / '-infinity' dates: the JDBC driver's infinity instants turned into days
#: with an int overflow when streamed, and as ``java.sql.Date`` labels in snapshots (no real date is near either:
#: PostgreSQL's dates start in 4713 BC)
DEBEZIUM_INFINITE_DAYS = {
    -2147472692: DATE_POS_INF, -2147472691: DATE_NEG_INF,  # streamed
    -622191234: DATE_POS_INF, -625821272: DATE_NEG_INF,  # snapshots (JDBC)
}  # fmt: skip

#: Spark's documented range, 0001-01-01 .. 9999-12-31T23:59:59.999999, in days and microseconds since the epoch
MIN_DAYS = -719162
MAX_DAYS = 2932896
MIN_MICROS = MIN_DAYS * 86_400_000_000
MAX_MICROS = (MAX_DAYS + 1) * 86_400_000_000 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def scaled(unscaled: int, scale: int) -> Decimal:
    """The exact decimal ``unscaled * 10**-scale`` (Kafka Connect's Decimal and Debezium's VariableScaleDecimal)."""
    return int_to_decimal(unscaled).scaleb(-scale, EXACT)


def special_float(value: Any) -> Any:
    """A float or double payload value: the JSON converter writes NaN and ±Infinity as strings."""
    if isinstance(value, str):
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.get(value, value)
    return value


# -- exact text of temporal values (day numbers as the stream's conversion counts them) ---------------------------
def _year(y: int) -> str:
    return f"{y:04d}" if 0 <= y <= 9999 else f"{y:+05d}"


def render_days(days: int) -> str:
    """ISO 8601 text of a day number (years outside 0..9999 signed, BC as astronomical years: 44 BC is -0043),
    or ``infinity`` / ``-infinity`` for walflow's fixed numbers."""
    if days == DATE_POS_INF:
        return "infinity"
    if days == DATE_NEG_INF:
        return "-infinity"
    y, m, d = days_to_civil(days)
    return f"{_year(y)}-{m:02d}-{d:02d}"


def render_micros(micros: int, zoned: bool = False) -> str:
    """ISO 8601 text of microseconds since the epoch (``Z``-suffixed when ``zoned``), or ``infinity`` /
    ``-infinity`` for Debezium's fixed numbers."""
    if micros == TS_POS_INF:
        return "infinity"
    if micros == TS_NEG_INF:
        return "-infinity"
    days, rem = divmod(micros, 86_400_000_000)
    seconds, frac = divmod(rem, 1_000_000)
    hh, rest = divmod(seconds, 3600)
    mm, ss = divmod(rest, 60)
    y, m, d = days_to_civil(days)
    text = f"{_year(y)}-{m:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}"
    if frac:
        text += "." + f"{frac:06d}".rstrip("0")
    return text + ("Z" if zoned else "")


def parse_zoned(text: str) -> int:
    """Microseconds since the epoch of a ``ZonedTimestamp`` (``2018-06-20T13:13:16.945104Z``, ``-0043-03-15T12:00:00Z``,
    ``+12345-...``, ``infinity``, ``-infinity``, or with a numeric offset)."""
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        delta = value - _EPOCH_TZ
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    except ValueError:
        pass
    if text == "infinity":
        return TS_POS_INF
    if text == "-infinity":
        return TS_NEG_INF
    sign = -1 if text.startswith("-") else 1
    body = text[1:] if text[:1] in "+-" else text
    date_part, _, time_part = body.partition("T")
    year_s, month_s, day_s = date_part.split("-")
    offset = 0
    if time_part.endswith("Z"):
        time_part = time_part[:-1]
    else:
        for i in range(len(time_part) - 1, 0, -1):
            if time_part[i] in "+-":
                hours, _, minutes = time_part[i + 1 :].partition(":")
                offset = (1 if time_part[i] == "+" else -1) * (int(hours) * 3600 + int(minutes or 0) * 60)
                time_part = time_part[:i]
                break
    hh, mm, ss = [*time_part.split(":"), "0", "0"][:3] if time_part else ("0", "0", "0")
    whole, _, frac = ss.partition(".")
    micros = ((int(hh) * 60 + int(mm)) * 60 + int(whole)) * 1_000_000 + int((frac + "000000")[:6])
    days = civil_to_days(sign * int(year_s), int(month_s), int(day_s))
    return days * 86_400_000_000 + micros - offset * 1_000_000


_EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


# -- fitting a column of one batch ---------------------------------------------------------------------
def _temporal_leaves(array: pa.Array) -> list[pa.Array]:
    kind = array.type
    if pa.types.is_timestamp(kind) or pa.types.is_date32(kind):
        return [array]
    if pa.types.is_list(kind):
        return _temporal_leaves(array.flatten())
    if pa.types.is_map(kind):
        return _temporal_leaves(array.keys) + _temporal_leaves(array.items)
    if pa.types.is_struct(kind):
        return [leaf for i in range(kind.num_fields) for leaf in _temporal_leaves(array.field(i))]
    return []


def has_temporal(kind: pa.DataType) -> bool:
    """Whether a column of this Arrow type holds timestamps or dates anywhere (the ones whose range is checked)."""
    if pa.types.is_timestamp(kind) or pa.types.is_date32(kind):
        return True
    if pa.types.is_list(kind):
        return has_temporal(kind.value_type)
    if pa.types.is_map(kind):
        return has_temporal(kind.key_type) or has_temporal(kind.item_type)
    if pa.types.is_struct(kind):
        return any(has_temporal(kind.field(i).type) for i in range(kind.num_fields))
    return False


def _in_range(array: pa.Array) -> bool:
    for leaf in _temporal_leaves(array):
        if leaf.null_count == len(leaf):
            continue
        if pa.types.is_date32(leaf.type):
            low, high = MIN_DAYS, MAX_DAYS
            ints = leaf.view(pa.int32())
        else:
            low, high = MIN_MICROS, MAX_MICROS
            ints = leaf.view(pa.int64())
        bounds = pc.min_max(ints)
        if bounds["min"].as_py() < low or bounds["max"].as_py() > high:
            return False
    return True


FITTED, INVALID = "fitted", "invalid"


def fit(value: Any, kind: pa.DataType) -> tuple[Any, str | None]:
    """``value`` made acceptable to Arrow type ``kind``, and what had to be done: None (nothing), :data:`FITTED`
    (clamped, or null for a value the type cannot hold, such as a decimal beyond its precision) or
    :data:`INVALID` (a value of the wrong kind for its column: the record is malformed, and the job reports it)."""
    if value is None:
        return None, None
    if pa.types.is_timestamp(kind) or pa.types.is_date32(kind) or pa.types.is_integer(kind):
        if isinstance(value, bool) or not isinstance(value, int):
            return None, INVALID
        if pa.types.is_timestamp(kind):
            low, high = MIN_MICROS, MAX_MICROS
        elif pa.types.is_date32(kind):
            low, high = MIN_DAYS, MAX_DAYS
        else:
            low, high = -(2 ** (kind.bit_width - 1)), 2 ** (kind.bit_width - 1) - 1
        clamped = min(max(value, low), high)
        return clamped, (FITTED if clamped != value else None)
    if pa.types.is_list(kind):
        if not isinstance(value, list):
            return None, INVALID
        items = [fit(x, kind.value_type) for x in value]
        return [x for x, _ in items], _worst(status for _, status in items)
    if pa.types.is_struct(kind):
        if not isinstance(value, dict):
            return None, INVALID
        fields = {
            kind.field(i).name: fit(value.get(kind.field(i).name), kind.field(i).type) for i in range(kind.num_fields)
        }
        return {n: v for n, (v, _) in fields.items()}, _worst(status for _, status in fields.values())
    if pa.types.is_map(kind):
        if not isinstance(value, list):
            return None, INVALID
        pairs = [(fit(k, kind.key_type), fit(v, kind.item_type)) for k, v in value]
        return [(k, v) for (k, _), (v, _) in pairs], _worst(status for pair in pairs for _, status in pair)
    try:
        pa.array([value], type=kind)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return None, (FITTED if pa.types.is_decimal(kind) and isinstance(value, Decimal) else INVALID)
    return value, None


def _worst(statuses: Any) -> str | None:
    found = None
    for status in statuses:
        if status == INVALID:
            return INVALID
        found = found or status
    return found


def _plain(value: Any, kind: pa.DataType) -> Any:
    """A JSON-ready form of a converted value with its temporal leaves as exact text."""
    if value is None:
        return None
    if pa.types.is_timestamp(kind):
        return render_micros(value, zoned=kind.tz is not None) if isinstance(value, int) else str(value)
    if pa.types.is_date32(kind):
        return render_days(value) if isinstance(value, int) else str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return value.hex()
    if pa.types.is_list(kind) and isinstance(value, list):
        return [_plain(x, kind.value_type) for x in value]
    if pa.types.is_struct(kind) and isinstance(value, dict):
        return {
            kind.field(i).name: _plain(value.get(kind.field(i).name), kind.field(i).type)
            for i in range(kind.num_fields)
        }
    if pa.types.is_map(kind) and isinstance(value, list):
        return {str(_plain(k, kind.key_type)): _plain(v, kind.item_type) for k, v in value}
    if isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def original_text(value: Any, kind: pa.DataType) -> str:
    """The text kept in ``_walflow_overflow`` for a value that did not fit: the plain text of a scalar
    (``infinity``, ``-0043-03-15``, ``12345-06-07T01:02:03.5``, a decimal's digits), JSON for a nested value."""
    plain = _plain(value, kind)
    if isinstance(plain, str):
        return plain
    return orjson.dumps(plain).decode()


def column_array(values: list[Any], kind: pa.DataType, temporal: bool) -> tuple[pa.Array, dict[int, tuple[str, str]]]:
    """The Arrow array of one column of a batch, and the rows whose value had to be fitted: row -> (status, the
    value's exact text), status :data:`FITTED` or :data:`INVALID` (see :func:`fit`).

    The fast path is one ``pa.array`` call plus, for columns holding timestamps or dates, one min/max over the
    values; only a batch where either fails is fitted value by value.
    """
    try:
        array = pa.array(values, type=kind)
        if not temporal or _in_range(array):
            return array, {}
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        pass
    fitted = []
    changed: dict[int, tuple[str, str]] = {}
    for row, value in enumerate(values):
        new, status = fit(value, kind)
        if status is not None:
            changed[row] = (status, original_text(value, kind))
        fitted.append(new)
    try:
        return pa.array(fitted, type=kind), changed
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        # a value fit() let through still fails: null the ones that fail alone
        for row, value in enumerate(fitted):
            try:
                pa.array([value], type=kind)
            except (pa.ArrowException, OverflowError, TypeError, ValueError):
                fitted[row] = None
                changed.setdefault(row, (INVALID, original_text(values[row], kind)))
        return pa.array(fitted, type=kind), changed
