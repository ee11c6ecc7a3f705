"""PostgreSQL's write-ahead log positions, as one value type with one text form.

An LSN is a 64-bit byte position; PostgreSQL prints it as two hexadecimal halves, ``16/B374D848``. :class:`Lsn` is an
``int`` (positions compare and subtract as numbers, and Debezium's records carry them as numbers) whose ``str`` is
PostgreSQL's form, so a log line, a state row and an error message all print a position the way ``psql`` does.
"""

from __future__ import annotations

from walflow.errors import DecodeError


class Lsn(int):
    """A WAL position: an ``int`` that prints as PostgreSQL prints an LSN."""

    __slots__ = ()

    @classmethod
    def parse(cls, text: str) -> Lsn:
        """The position PostgreSQL's ``XXX/XXX`` text names; :class:`~walflow.errors.DecodeError` for other text."""
        try:
            high, low = text.split("/")
            return cls((int(high, 16) << 32) | int(low, 16))
        except (ValueError, AttributeError):
            raise DecodeError(f"{text!r} is not an LSN (expected the form 16/B374D848)") from None

    def __str__(self) -> str:
        return f"{self >> 32:X}/{self & 0xFFFFFFFF:X}"

    def __repr__(self) -> str:
        return f"Lsn('{self}')"

    def __format__(self, spec: str) -> str:
        # a position in an f-string or a %s reads as PostgreSQL prints it; a numeric spec (``:d``, ``:x``) as a number
        return str(self) if not spec else int(self).__format__(spec)
