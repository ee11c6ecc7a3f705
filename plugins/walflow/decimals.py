"""PostgreSQL ``numeric`` text as Debezium's decimal values: Kafka Connect's ``Decimal`` (base64 of the unscaled
value's two's-complement bytes at a fixed scale) and Debezium's ``VariableScaleDecimal`` (the same with its own
scale). :mod:`walflow.convert` builds the schemas around these.
"""

from __future__ import annotations

from binascii import b2a_base64
from collections.abc import Callable
from decimal import Decimal, localcontext
from typing import Any

#: the special values PostgreSQL prints, and Debezium's names for them in ``decimal.handling.mode=string``
SPECIAL_DECIMAL_NAMES = {"NaN": "NAN", "Infinity": "POSITIVE_INFINITY", "-Infinity": "NEGATIVE_INFINITY"}


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

    def fixed(text: str, _scale: int = scale, _exp: Decimal = exponent, _encode: Callable[[int], str] = unscaled_base64) -> str | None:
        # PostgreSQL prints numeric(p, s) with exactly s fraction digits, so the unscaled value is the digits
        # without the point; anything else (NaN, negative scales) takes the Decimal path
        head, dot, frac = text.partition(".")
        if dot and len(frac) == _scale:
            return _encode(int(head + frac))
        if not dot and _scale == 0 and text not in SPECIAL_DECIMAL_NAMES:
            return _encode(int(text))
        if text in SPECIAL_DECIMAL_NAMES:
            # precise mode cannot carry NaN (nor ±Infinity, which only unconstrained numeric can hold since
            # PostgreSQL 14): Debezium emits null
            return None
        if len(frac) < _scale:  # a negative scale read as Debezium reads it: pad, no arithmetic
            return _encode(int(head + frac.ljust(_scale, "0")))
        with localcontext() as ctx:
            ctx.prec = 1000 + len(text)  # never round here
            return _encode(int(Decimal(text).quantize(_exp).scaleb(_scale)))

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
    unscaled = int(head + frac) if head not in ("-", "") else int(head + (frac or "0"))
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
