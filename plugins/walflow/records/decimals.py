"""PostgreSQL ``numeric`` text as Debezium's decimal values: Kafka Connect's ``Decimal`` (base64 of the unscaled
value's two's-complement bytes at a fixed scale) and Debezium's ``VariableScaleDecimal`` (the same with its own
scale). :mod:`walflow.records.convert` builds the schemas around these.
"""

from __future__ import annotations

import decimal
from binascii import b2a_base64
from collections.abc import Callable
from decimal import Decimal, localcontext
from functools import lru_cache
from typing import Any

#: the special values PostgreSQL prints, and Debezium's names for them in ``decimal.handling.mode=string``
SPECIAL_DECIMAL_NAMES = {"NaN": "NAN", "Infinity": "POSITIVE_INFINITY", "-Infinity": "NEGATIVE_INFINITY"}


#: Decimal arithmetic that never rounds (numerics hold up to 131,072 digits before the point and 16,383 after it)
EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
#: Below this many digits ``int(text)`` is used as it is: Python refuses to parse integers of more than 4,300
#: digits (``sys.get_int_max_str_digits``, a guard against its quadratic conversion), and larger ones are split.
_PLAIN_DIGITS = 3000
#: Below this many bits ``Decimal(int)`` is used as it is (its conversion is quadratic too).
_PLAIN_BITS = 9000


@lru_cache(maxsize=64)
def _power_of_ten(exponent: int) -> int:
    power: int = 10**exponent  # int ** int is typed Any (a negative exponent gives a float); exponent >= 0 here
    return power


@lru_cache(maxsize=64)
def _power_of_two(exponent: int) -> Decimal:
    return EXACT.power(Decimal(2), exponent)


def digits_to_int(text: str) -> int:
    """The integer of a run of decimal digits (an optional sign first), however long.

    PostgreSQL's numeric holds 131,072 digits before the point: ``int()`` refuses such text (Python's limit of
    4,300 digits) and takes time quadratic in its length. Splitting the text in halves and joining the halves with
    one multiplication (Karatsuba in CPython) turns the longest value into a few tens of milliseconds.
    """
    if len(text) <= _PLAIN_DIGITS:
        return int(text)
    if text[0] in "+-":
        magnitude = digits_to_int(text[1:])
        return -magnitude if text[0] == "-" else magnitude
    low = len(text) // 2
    return digits_to_int(text[:-low]) * _power_of_ten(low) + digits_to_int(text[-low:])


def int_to_decimal(value: int) -> Decimal:
    """``Decimal(value)`` for integers of any size, in time below quadratic: the halves of the binary number are
    converted apart and joined by decimal arithmetic (libmpdec's fast multiplication). The lake turns the unscaled
    values of records back into decimal text through it; ``str(int)`` refuses more than 4,300 digits."""
    if value.bit_length() <= _PLAIN_BITS:
        return Decimal(value)
    if value < 0:
        return int_to_decimal(-value).copy_negate()  # not unary minus: it rounds to the context's 28 digits

    def halves(number: int, bits: int) -> Decimal:
        if bits <= _PLAIN_BITS:
            return Decimal(number)
        low = bits >> 1
        high = halves(number >> low, bits - low)
        return EXACT.add(EXACT.multiply(high, _power_of_two(low)), halves(number & ((1 << low) - 1), low))

    return halves(value, value.bit_length())


def numeric_precision_scale(modifier: int) -> tuple[int | None, int | None]:
    """``numeric(p, s)``'s precision and scale from its type modifier; (None, None) when unconstrained."""
    if modifier < 4:
        return None, None
    value = modifier - 4
    # PostgreSQL 15 stores the scale as an 11-bit two's-complement number (numeric(5,-2) holds 0x7fe); Debezium
    # reads it as the JDBC driver does, unsigned, so numeric(5,-2) has scale 2046 there. The records follow
    # Debezium (the value is still exact: unscaled x 10^-2046 is the number); the lake turns it back into -2.
    return (value >> 16) & 0xFFFF, value & 0xFFFF


def unscaled_base64(unscaled: int, _b64: Callable[..., bytes] = b2a_base64) -> str:
    """The JSON form of an unscaled decimal value: base64 of Java's ``BigInteger.toByteArray()``, the shortest
    two's-complement bytes, sign bit included."""
    length = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) >> 3
    return _b64(unscaled.to_bytes(length, "big", signed=True), newline=False).decode("ascii")


def fixed_scale(scale: int) -> Callable[[str], str | None]:
    """The converter of ``numeric(p, scale)`` text to a Kafka Connect ``Decimal`` of that scale (None for NaN)."""
    exponent = Decimal(1).scaleb(-scale)

    def fixed(
        text: str, _scale: int = scale, _exp: Decimal = exponent, _encode: Callable[[int], str] = unscaled_base64
    ) -> str | None:
        # PostgreSQL prints numeric(p, s) with exactly s fraction digits, so the unscaled value is the digits
        # without the point; anything else (NaN, negative scales) takes the Decimal path
        head, dot, frac = text.partition(".")
        if dot and len(frac) == _scale:
            return _encode(digits_to_int(head + frac))
        if not dot and _scale == 0 and text not in SPECIAL_DECIMAL_NAMES:
            return _encode(digits_to_int(text))
        if text in SPECIAL_DECIMAL_NAMES:
            # precise mode cannot carry NaN (nor ±Infinity, which only unconstrained numeric can hold since
            # PostgreSQL 14): Debezium emits null
            return None
        if len(frac) < _scale:  # a negative scale read as Debezium reads it: pad, no arithmetic
            return _encode(digits_to_int(head + frac.ljust(_scale, "0")))
        with localcontext() as ctx:
            ctx.prec = 1000 + len(text)  # never round here
            # the digits of the value at the column's scale, as text: int(Decimal) is quadratic in their number
            return _encode(digits_to_int(format(Decimal(text).quantize(_exp).scaleb(_scale), "f")))

    return fixed


def variable_scale(text: str) -> dict[str, Any] | None:
    """Unconstrained ``numeric`` text as a ``VariableScaleDecimal`` value (None for NaN and the infinities)."""
    if text in SPECIAL_DECIMAL_NAMES:
        return None
    # PostgreSQL prints numeric in plain notation; digits after the point are the value's scale, without trailing
    # zeros (Debezium strips them: 3.0 has scale 0, 100 stays 100 with scale 0). Working on the text keeps every
    # digit (Decimal arithmetic would round at its context precision).
    head, _, frac = text.partition(".")
    frac = frac.rstrip("0")
    unscaled = digits_to_int(head + frac) if head not in ("-", "") else digits_to_int(head + (frac or "0"))
    return {"scale": len(frac), "value": unscaled_base64(unscaled)}


def variable_scale_schema() -> dict[str, Any]:
    """The schema of a ``VariableScaleDecimal`` (a new dict each time: callers complete it)."""
    return {
        "type": "struct",
        "fields": [
            {"type": "int32", "optional": False, "field": "scale"},
            {"type": "bytes", "optional": False, "field": "value"},
        ],
        "optional": True,
        "name": "io.debezium.data.VariableScaleDecimal",
        "version": 1,
        "doc": "Variable scaled decimal",
    }
