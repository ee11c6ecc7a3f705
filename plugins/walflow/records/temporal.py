"""PostgreSQL's text output of dates, times, timestamps and intervals turned into Debezium's numbers and strings.

Pure functions of the text the sessions of :data:`walflow.source.connection.SESSION_SETTINGS` produce
(``DateStyle=ISO``, ``IntervalStyle=iso_8601``, ``TimeZone=UTC``), for every year PostgreSQL stores (BC dates and years
past 9999 included, which Python's ``datetime`` cannot hold) and for ``infinity``, which Debezium turns into fixed
numbers.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


#: What Debezium emits for 'infinity' / '-infinity' dates: the JDBC driver's infinity instants
#: (PGStatement.DATE_POSITIVE_INFINITY / DATE_NEGATIVE_INFINITY milliseconds) turned into days with an int overflow.
DATE_POS_INF_DAYS, DATE_NEG_INF_DAYS = -2147472692, -2147472691


def date_days(text: str) -> int:
    if text == "infinity":
        return DATE_POS_INF_DAYS
    if text == "-infinity":
        return DATE_NEG_INF_DAYS
    bc = text.endswith(" BC")
    if bc:
        text = text[:-3]
    year_s, month_s, day_s = text.rsplit("-", 2)
    year = int(year_s)
    if bc:
        year = 1 - year
    return civil_to_days(year, int(month_s), int(day_s))


def civil_to_days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date, for any year (Python's date stops at 1..9999)."""
    if 1 <= year <= 9999:
        return date(year, month, day).toordinal() - _EPOCH_ORDINAL
    # Howard Hinnant's days_from_civil, valid for all years.
    y = year - (month <= 2)
    era = y // 400  # floor division: Python needs no adjustment for negative years
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


#: What Debezium's snapshots (a JDBC query) emit for 'infinity' / '-infinity' dates: the driver's infinity
#: instants as java.sql.Date labels (292278994-08-16 and, era lost, 292269055-12-02) in days, cut to an int.
JDBC_DATE_POS_INF_DAYS, JDBC_DATE_NEG_INF_DAYS = -622191234, -625821272


def jdbc_days(text: str) -> int:
    """A date as Debezium's snapshots see it through the JDBC driver's ``java.sql.Date``: the same as streamed for
    dates of the common era, the year of a BC date without its era (44 BC is read as 44 AD), fixed numbers for the
    infinities."""
    if text == "infinity":
        return JDBC_DATE_POS_INF_DAYS
    if text == "-infinity":
        return JDBC_DATE_NEG_INF_DAYS
    if text.endswith(" BC"):
        year_s, month_s, day_s = text[:-3].rsplit("-", 2)
        return civil_to_days(int(year_s), int(month_s), int(day_s))
    return date_days(text)


def time_micros(text: str) -> int:
    hh, mm, rest = text.split(":", 2)
    if "." in rest:
        ss, frac = rest.split(".")
        micros = int((frac + "000000")[:6])
    else:
        ss, micros = rest, 0
    return ((int(hh) * 60 + int(mm)) * 60 + int(ss)) * 1_000_000 + micros


# The reference's fixed values for 'infinity'/'-infinity' timestamps (PostgreSQL's JDBC driver's
# PGStatement.DATE_POSITIVE_INFINITY / DATE_NEGATIVE_INFINITY), in microsecond fields; Debezium 3.6 divides them by
# 1000 in millisecond fields (precision 0-3, and the connect mode).
_TS_POS_INF = 9223372036825200000


_TS_NEG_INF = -9223372036832400000


_TS_POS_INF_MS = _TS_POS_INF // 1000


_TS_NEG_INF_MS = -(-_TS_NEG_INF // 1000)


_NAIVE_EPOCH = datetime(1970, 1, 1)


def timestamp_micros(text: str) -> int:
    try:
        # The common case, in C: years 1..9999, no BC, no infinity.
        delta = datetime.fromisoformat(text) - _NAIVE_EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    except ValueError:
        pass
    if text == "infinity":
        return _TS_POS_INF
    if text == "-infinity":
        return _TS_NEG_INF
    day_part, time_part = text.split(" ", 1)
    bc = time_part.endswith(" BC")
    if bc:
        time_part = time_part[:-3]
        day_part += " BC"
    return date_days(day_part) * 86_400_000_000 + time_micros(time_part)


def timestamp_millis(text: str) -> int:
    """Milliseconds since the epoch (``Timestamp``, connect mode); infinities are the fixed values in ms."""
    try:
        delta = datetime.fromisoformat(text) - _NAIVE_EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000 + delta.microseconds // 1_000
    except ValueError:
        pass
    if text == "infinity":
        return _TS_POS_INF_MS
    if text == "-infinity":
        return _TS_NEG_INF_MS
    return timestamp_micros(text) // 1000


def _split_offset(text: str) -> tuple[str, int]:
    """Split '15:13:16.945+05:30' into the local part and the offset in seconds."""
    for i in range(len(text) - 1, 0, -1):
        ch = text[i]
        if ch in "+-":
            sign = 1 if ch == "+" else -1
            parts = text[i + 1 :].split(":")
            seconds = int(parts[0]) * 3600 + (int(parts[1]) * 60 if len(parts) > 1 else 0)
            seconds += int(parts[2]) if len(parts) > 2 else 0
            return text[:i], sign * seconds
        if ch == ":" or ch.isdigit():
            continue
        break
    raise ValueError(f"no UTC offset in {text!r}")


def format_zoned_micros(micros: int, width: int = 0) -> str:
    """ISO-8601 in UTC as Java formats a ZonedDateTime for Debezium: with ``width`` > 0 exactly that many fraction
    digits (the column's precision), otherwise only the digits needed."""
    days, rem = divmod(micros, 86_400_000_000)
    seconds, frac = divmod(rem, 1_000_000)
    hh, rest = divmod(seconds, 3600)
    mm, ss = divmod(rest, 60)
    y, m, d = days_to_civil(days)
    year = f"{y:04d}" if 0 <= y <= 9999 else f"{y:+05d}"
    text = f"{year}-{m:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}"
    if width > 0:
        text += "." + (f"{frac:06d}" + "000")[:width]
    elif frac:
        text += "." + f"{frac:06d}".rstrip("0")
    return text + "Z"


def days_to_civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day number since 1970-01-01, for any year (astronomical: 1 BC is year 0)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return y + (m <= 2), m, d


def zoned_timestamp(text: str, width: int = 6) -> str:
    if text in ("infinity", "-infinity"):
        return text
    bc = text.endswith(" BC")
    if bc:
        text = text[:-3]
    local, offset = _split_offset(text)
    if bc:
        day_part, time_part = local.split(" ", 1)
        local = f"{day_part} BC"
        micros = date_days(local) * 86_400_000_000 + time_micros(time_part)
    else:
        micros = timestamp_micros(local)
    return format_zoned_micros(micros - offset * 1_000_000, width)


def zoned_time(text: str) -> str:
    local, offset = _split_offset(text)
    micros = (time_micros(local) - offset * 1_000_000) % 86_400_000_000
    seconds, frac = divmod(micros, 1_000_000)
    hh, rest = divmod(seconds, 3600)
    mm, ss = divmod(rest, 60)
    out = f"{hh:02d}:{mm:02d}:{ss:02d}"
    if frac:
        out += "." + f"{frac:06d}".rstrip("0")
    return out + "Z"


def datetime_precision(modifier: int) -> int:
    return 6 if modifier < 0 else modifier


# -- interval --------------------------------------------------------------------------------------
_DAYS_PER_MONTH_AVG = 365.25 / 12.0


def _interval_parts(text: str) -> tuple[int, int, int, int, int, Decimal]:
    """Parse IntervalStyle=iso_8601 output ('P1Y2M3DT4H5M6.78S', 'P-1Y-2M3DT-4H-5M-6.78S', 'PT0S')."""
    if not text.startswith("P"):
        raise ValueError(f"not an ISO 8601 interval: {text!r}")
    date_part, _, time_part = text[1:].partition("T")
    years = months = days = hours = minutes = 0
    seconds = Decimal(0)
    for part, units in ((date_part, "YMD"), (time_part, "HMS")):
        number = ""
        for ch in part:
            if ch in units:
                if ch == "S":
                    seconds = Decimal(number)
                else:
                    value = int(number)
                    if part is date_part:
                        if ch == "Y":
                            years = value
                        elif ch == "M":
                            months = value
                        else:
                            days = value
                    elif ch == "H":
                        hours = value
                    else:
                        minutes = value
                number = ""
            else:
                number += ch
        if number:
            raise ValueError(f"not an ISO 8601 interval: {text!r}")
    return years, months, days, hours, minutes, seconds


def interval_micros(text: str) -> int:
    years, months, days, hours, minutes, seconds = _interval_parts(text)
    number_of_days = ((years * 12) + months) * _DAYS_PER_MONTH_AVG + days
    number_of_seconds = (((number_of_days * 24 + hours) * 60) + minutes) * 60 + float(seconds)
    return int(number_of_seconds * 1e6)  # Java's (long) cast truncates toward zero


def interval_string(text: str) -> str:
    years, months, days, hours, minutes, seconds = _interval_parts(text)
    exponent = seconds.as_tuple().exponent
    if not isinstance(exponent, int):  # NaN or an infinity, which PostgreSQL never prints in an interval
        raise ValueError(f"not an ISO 8601 interval: {text!r}")
    if -exponent > 6:
        seconds = seconds.quantize(Decimal("0.000001"), rounding="ROUND_DOWN")
    sec = format(seconds.normalize(), "f") if seconds else "0"
    return f"P{years}Y{months}M{days}DT{hours}H{minutes}M{sec}S"
