"""Java's regular expressions (``java.util.regex.Pattern``), translated to the ``regex`` module's syntax.

Debezium compiles every pattern of a configuration with Java: the include and exclude lists (case-insensitive),
Kafka Connect's ``RegexRouter`` and ``TopicNameMatches`` and Debezium's routers (case-sensitive), each matched
against a whole name. A configuration brought from Debezium must select the same tables and route to the same topics
here, so a pattern is not handed to Python as it is written: :func:`translate` reads it with Java's grammar and writes
an equivalent ``regex`` (version 1) pattern, where Java and Python differ:

* ``\\Q...\\E`` quoting, ``\\k<name>``, Java's back-reference digits (``\\12`` is group 1 then ``2`` when there is no
  twelfth group; a group that does not exist never matches);
* character classes with union (``[a-d[m-p]]``) and intersection (``[a-z&&[^aeiou]]``), ``]`` first in a class, and
  whitespace ignored in classes under ``(?x)``;
* Java's ASCII-only predefined classes (``\\w``, ``\\d``, ``\\s``, ``\\p{Alpha}``...), its ``\\h``, ``\\v``, ``\\R``,
  its ``\\p{javaLowerCase}`` and Unicode property names, and its word boundary (letters and digits of any script);
* ``.`` and ``$`` with Java's line terminators, ``\\Z``/``\\z``;
* case-insensitivity that folds ASCII letters only unless ``(?u)`` is set, and embedded flags that apply from where
  they stand to the end of their group.

What cannot be translated exactly is refused before anything runs, with :class:`~walflow.errors.PatternError` naming
the construct: multi-line mode ``(?m)``, ``(?U)``, ``\\G``, ``\\X``, ``\\N{...}``, ``\\b{g}``, back-references in a
case-insensitive pattern, and property names this module does not know. Patterns Java itself refuses are refused too.
``tests/compat/test_javaregex.py`` compares the translation with ``java.util.regex`` on hundreds of patterns and names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import regex

from walflow.errors import PatternError

#: ``java.util.regex.Pattern``'s flag bits, as Debezium and Kafka Connect pass them
CASE_INSENSITIVE = 0x02
UNICODE_CASE = 0x40

_LINE_TERMINATORS = "\\n\\r\\u0085\\u2028\\u2029"
#: Java's word characters for ``\\b`` (``Character.isLetterOrDigit`` or ``_``) and the bases of non-spacing marks
_WORD = r"[\p{L}\p{Nd}_]"
_BASE = r"[\p{L}\p{Nd}]"
_AFTER_WORD = rf"(?:(?<={_WORD})|(?<={_BASE}\p{{Mn}}+))"
_BEFORE_WORD = rf"(?:(?={_WORD})|(?=\p{{Mn}})(?<={_BASE}\p{{Mn}}*))"
_BOUNDARY = rf"(?:{_AFTER_WORD}(?!{_BEFORE_WORD})|(?!{_AFTER_WORD}){_BEFORE_WORD})"

#: Java's predefined classes as ``regex`` set items (without brackets), and their complements' names
_PREDEFINED = {
    "d": "0-9",
    "w": "a-zA-Z_0-9",
    "s": " \\t\\n\\x0B\\f\\r",
    "h": " \\t\\xA0\\u1680\\u180E\\u2000-\\u200A\\u202F\\u205F\\u3000",
    "v": "\\n\\x0B\\f\\r\\x85\\u2028\\u2029",
}
#: POSIX classes (US-ASCII only, as Java defines them)
_POSIX = {
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": "\\x00-\\x7F",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": "!-/:-@\\[-`{-~",
    "Graph": "!-~",
    "Print": " -~",
    "Blank": " \\t",
    "Cntrl": "\\x00-\\x1F\\x7F",
    "XDigit": "0-9a-fA-F",
    "Space": " \\t\\n\\x0B\\f\\r",
}
#: ``java.lang.Character`` classes and Unicode binary properties Java knows, in ``regex``'s names
_JAVA_CLASSES = {
    "javaLowerCase": "\\p{Lowercase}",
    "javaUpperCase": "\\p{Uppercase}",
    "javaTitleCase": "\\p{Lt}",
    "javaDigit": "\\p{Nd}",
    "javaLetter": "\\p{L}",
    "javaLetterOrDigit": "\\p{L}\\p{Nd}",
    "javaAlphabetic": "\\p{Alphabetic}",
    "javaIdeographic": "\\p{Ideographic}",
    "javaSpaceChar": "\\p{Z}",
    "javaWhitespace": "\\t\\n\\x0B\\f\\r\\x1C-\\x1F \\u1680\\u2000-\\u2006\\u2008-\\u200A\\u2028\\u2029\\u205F\\u3000",
    "javaISOControl": "\\x00-\\x1F\\x7F-\\x9F",
}
_BINARY = {
    "ALPHABETIC": "\\p{Alphabetic}",
    "IDEOGRAPHIC": "\\p{Ideographic}",
    "LETTER": "\\p{L}",
    "LOWERCASE": "\\p{Lowercase}",
    "UPPERCASE": "\\p{Uppercase}",
    "TITLECASE": "\\p{Lt}",
    "PUNCTUATION": "\\p{P}",
    "CONTROL": "\\p{Cc}",
    "WHITE_SPACE": "\\p{White_Space}",
    "WHITESPACE": "\\p{White_Space}",
    "DIGIT": "\\p{Nd}",
    "HEX_DIGIT": "\\p{Hex_Digit}",
    "HEXDIGIT": "\\p{Hex_Digit}",
    "JOIN_CONTROL": "\\p{Join_Control}",
    "JOINCONTROL": "\\p{Join_Control}",
    "NONCHARACTER_CODE_POINT": "\\p{Noncharacter_Code_Point}",
    "NONCHARACTERCODEPOINT": "\\p{Noncharacter_Code_Point}",
    "ASSIGNED": "\\P{Cn}",
}
_CATEGORIES = {
    "L", "Lu", "Ll", "Lt", "Lm", "Lo", "LC", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No", "P", "Pc", "Pd", "Ps", "Pe",
    "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf", "Co", "Cs", "Cn",
}  # fmt: skip
#: what case-insensitivity makes of a class of one case: Java matches a letter of any case
_CASED = "\\p{Lowercase}\\p{Uppercase}\\p{Lt}"
_CASED_NAMES = {"javaLowerCase", "javaUpperCase", "javaTitleCase", "LOWERCASE", "UPPERCASE", "TITLECASE"}
_CASED_CATEGORIES = {"Lu", "Ll", "Lt"}

_FLAG_LETTERS = "idmsuxU"


@dataclass(frozen=True)
class _Flags:
    case_insensitive: bool = False
    unicode_case: bool = False
    dotall: bool = False
    comments: bool = False
    unix_lines: bool = False


class _Translator:
    """One pattern read with Java's grammar; :meth:`pattern` returns the ``regex`` translation."""

    def __init__(self, text: str, flags: _Flags, origin: str) -> None:
        self.text = text
        self.i = 0
        self.flags = flags
        self.origin = origin
        self.groups = 0
        self.names: set[str] = set()

    # -- errors -----------------------------------------------------------------------------------------------------
    def refuse(self, construct: str) -> PatternError:
        return PatternError(
            f"{self.origin}: the regular expression {self.text!r} uses {construct} (at offset {self.i}), which walflow "
            "cannot match exactly as Java does; rewrite that part of the pattern"
        )

    def invalid(self, why: str) -> PatternError:
        return PatternError(
            f"{self.origin}: {self.text!r} is not a valid Java regular expression ({why}, at offset {self.i})"
        )

    # -- reading ----------------------------------------------------------------------------------------------------
    def peek(self) -> str:
        self.skip_comments()
        return self.text[self.i] if self.i < len(self.text) else ""

    def skip_comments(self) -> None:
        if not self.flags.comments:
            return
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch in " \t\n\x0b\f\r":
                self.i += 1
            elif ch == "#":
                while self.i < len(self.text) and self.text[self.i] not in "\n\r\u0085\u2028\u2029":
                    self.i += 1
            else:
                return

    def take(self) -> str:
        ch = self.peek()
        if not ch:
            raise self.invalid("unexpected end")
        self.i += 1
        return ch

    # -- the grammar ------------------------------------------------------------------------------------------------
    def pattern(self) -> str:
        out = self.alternation()
        if self.i < len(self.text):
            raise self.invalid("unmatched closing ')'")
        return out

    def alternation(self) -> str:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return "|".join(branches)

    def sequence(self) -> str:
        out: list[str] = []
        while True:
            ch = self.peek()
            if ch in ("", "|", ")"):
                return "".join(out)
            atom = self.atom()
            if atom is None:
                continue  # an embedded flag: nothing to repeat
            out.append(atom + self.quantifier())

    def quantifier(self) -> str:
        ch = self.peek()
        if ch in ("*", "+", "?"):
            self.i += 1
            base = ch
        elif ch == "{":
            start = self.i
            end = self.text.find("}", self.i)
            body = self.text[self.i + 1 : end] if end > 0 else ""
            low, comma, high = body.partition(",")
            if not low.isdigit() or (high and not high.isdigit()) or (high and int(high) < int(low)):
                self.i = start
                raise self.invalid("illegal repetition")
            self.i = end + 1
            base = "{" + low + comma + high + "}"
        else:
            return ""
        mode = self.peek()
        if mode in ("?", "+"):
            self.i += 1
            base += mode
        if self.peek() in ("*", "+", "?", "{"):
            raise self.invalid("dangling meta character")
        return base

    def atom(self) -> str | None:
        ch = self.take()
        if ch == "(":
            return self.group()
        if ch == "[":
            return self.char_class()
        if ch == "\\":
            return self.escape()
        if ch == ".":
            if self.flags.dotall:
                return "(?s:.)"
            return "[^\\n]" if self.flags.unix_lines else f"[^{_LINE_TERMINATORS}]"
        if ch == "^":
            return "\\A"
        if ch == "$":
            return self.end_anchor()
        if ch in ("*", "+", "?"):
            raise self.invalid("dangling meta character")
        if ch == "{":
            raise self.invalid("illegal repetition")
        return self.literal(ch)

    def end_anchor(self) -> str:
        if self.flags.unix_lines:
            return "(?=\\n?\\Z)"
        return f"(?=(?:\\r\\n|[{_LINE_TERMINATORS}])?\\Z)(?!(?<=\\r)\\n)"

    def literal(self, ch: str) -> str:
        if self.flags.case_insensitive and ch.isalpha():
            if self.flags.unicode_case:
                return f"(?i:{_escape(ch)})"
            if ch.isascii():
                return f"[{ch.lower()}{ch.upper()}]"
        return _escape(ch)

    def group(self) -> str | None:
        saved = self.flags
        if not self.text.startswith("?", self.i):
            self.groups += 1
            head = "("
        else:
            self.i += 1
            kind = self.text[self.i : self.i + 2]
            if kind.startswith((":", "=", "!", ">")):
                head = "(?" + kind[0]
                self.i += 1
            elif kind in ("<=", "<!"):
                head = "(?" + kind
                self.i += 2
            elif kind.startswith("<"):
                end = self.text.find(">", self.i)
                name = self.text[self.i + 1 : end] if end > 0 else ""
                if not regex.fullmatch(r"[a-zA-Z][a-zA-Z0-9]*", name):
                    raise self.invalid(f"bad named group {name!r}")
                if name in self.names:
                    raise self.invalid(f"named group {name!r} defined twice")
                self.names.add(name)
                self.groups += 1
                self.i = end + 1
                head = f"(?P<{name}>"
            else:
                return self.embedded_flags(saved)
        body = self.alternation()
        if self.peek() != ")":
            raise self.invalid("unclosed group")
        self.i += 1
        self.flags = saved
        return head + body + ")"

    def embedded_flags(self, saved: _Flags) -> str | None:
        """``(?idmsux-idmsux)`` (the rest of the enclosing group) or ``(?idmsux-idmsux:X)`` (X only)."""
        on = True
        flags = self.flags
        while True:
            ch = self.take()
            if ch == "-":
                on = False
            elif ch in _FLAG_LETTERS:
                flags = self.set_flag(flags, ch, on)
            elif ch == ")":
                self.flags = flags
                return None
            elif ch == ":":
                self.flags = flags
                body = self.alternation()
                if self.peek() != ")":
                    raise self.invalid("unclosed group")
                self.i += 1
                self.flags = saved
                return "(?:" + body + ")"
            else:
                raise self.invalid(f"unknown inline modifier {ch!r}")

    def set_flag(self, flags: _Flags, letter: str, on: bool) -> _Flags:
        if letter == "m":
            raise self.refuse("multi-line mode (?m)")
        if letter == "U":
            raise self.refuse("UNICODE_CHARACTER_CLASS (?U)")
        field = {
            "i": "case_insensitive",
            "u": "unicode_case",
            "s": "dotall",
            "x": "comments",
            "d": "unix_lines",
        }[letter]
        return replace(flags, **{field: on})

    # -- escapes ----------------------------------------------------------------------------------------------------
    def escape(self) -> str:
        if self.i >= len(self.text):
            raise self.invalid("trailing backslash")
        ch = self.text[self.i]
        self.i += 1
        if ch == "Q":
            end = self.text.find("\\E", self.i)
            quoted = self.text[self.i :] if end < 0 else self.text[self.i : end]
            self.i = len(self.text) if end < 0 else end + 2
            return "".join(self.literal(c) for c in quoted)
        if ch.isdigit() and ch != "0":
            return self.back_reference(ch)
        if ch == "k":
            if not self.text.startswith("<", self.i):
                raise self.invalid("\\k is not followed by '<'")
            end = self.text.find(">", self.i)
            name = self.text[self.i + 1 : end]
            if name not in self.names:
                raise self.invalid(f"named capturing group <{name}> does not exist")
            self.i = end + 1
            if self.flags.case_insensitive:
                raise self.refuse("a back-reference in a case-insensitive pattern")
            return f"(?P={name})"
        if ch == "b":
            if self.text.startswith("{", self.i):
                raise self.refuse("\\b{g}")
            return _BOUNDARY
        if ch == "B":
            return f"(?!{_BOUNDARY})"
        if ch == "A":
            return "\\A"
        if ch == "z":
            return "\\Z"
        if ch == "Z":
            return self.end_anchor()
        if ch == "R":
            return "(?>\\r\\n|[\\n\\x0B\\f\\r\\x85\\u2028\\u2029])"
        if ch in ("G", "X", "N"):
            raise self.refuse({"G": "\\G", "X": "\\X (grapheme clusters)", "N": "\\N{name}"}[ch])
        items = self.class_escape(ch)
        if items is not None:
            return f"[{items}]"
        return self.literal(self.char_escape(ch))

    def back_reference(self, first: str) -> str:
        if self.flags.case_insensitive:
            raise self.refuse("a back-reference in a case-insensitive pattern")
        number = first
        while self.i < len(self.text) and self.text[self.i].isdigit():
            longer = number + self.text[self.i]
            if int(longer) > self.groups:
                break
            number = longer
            self.i += 1
        if int(number) > self.groups:
            return "(?!)"  # Java: a reference to a group that does not exist never matches
        return f"(?:\\{number})"

    def class_escape(self, ch: str) -> str | None:
        """The set items of a predefined class escape (``^`` first for a complement), or ``None``."""
        if ch.lower() in _PREDEFINED:
            items = _PREDEFINED[ch.lower()]
            return items if ch.islower() else "^" + items
        if ch in ("p", "P"):
            items = self.property()
            return items if ch == "p" else "^" + items
        return None

    def property(self) -> str:
        if self.text.startswith("{", self.i):
            end = self.text.find("}", self.i)
            if end < 0:
                raise self.invalid("unclosed character family")
            name = self.text[self.i + 1 : end]
            self.i = end + 1
        else:
            name = self.text[self.i : self.i + 1]
            self.i += 1
        cased = self.flags.case_insensitive
        if name in _POSIX:
            if cased and name in ("Lower", "Upper"):
                return _POSIX["Alpha"]
            return _POSIX[name]
        if name in _JAVA_CLASSES:
            return _CASED if cased and name in _CASED_NAMES else _JAVA_CLASSES[name]
        key, _, value = name.partition("=")
        if value:
            kind = key.lower()
            if kind in ("script", "sc"):
                return f"\\p{{Script={value}}}" if self.known(f"\\p{{Script={value}}}") else self.unknown(name)
            if kind in ("block", "blk"):
                return f"\\p{{Block={value}}}" if self.known(f"\\p{{Block={value}}}") else self.unknown(name)
            if kind in ("general_category", "gc"):
                return self.category(value, name)
            return self.unknown(name)
        if name.startswith("In"):
            block = name[2:]
            return f"\\p{{Block={block}}}" if self.known(f"\\p{{Block={block}}}") else self.unknown(name)
        if name.startswith("Is"):
            rest = name[2:]
            if rest.upper() in _BINARY:
                return _CASED if cased and rest.upper() in _CASED_NAMES else _BINARY[rest.upper()]
            if rest in _CATEGORIES:
                return self.category(rest, name)
            if self.known(f"\\p{{Script={rest}}}"):
                return f"\\p{{Script={rest}}}"
            return self.unknown(name)
        return self.category(name, name)

    def category(self, value: str, name: str) -> str:
        if value not in _CATEGORIES:
            return self.unknown(name)
        if self.flags.case_insensitive and value in _CASED_CATEGORIES:
            return "\\p{Lu}\\p{Ll}\\p{Lt}"
        return f"\\p{{{value}}}"

    def known(self, item: str) -> bool:
        try:
            regex.compile(item)
        except regex.error:
            return False
        return True

    def unknown(self, name: str) -> str:
        raise self.refuse(f"the character property \\p{{{name}}}, which walflow does not know")

    def char_escape(self, ch: str) -> str:
        """The one character an escape stands for (after the backslash and ``ch``)."""
        simple = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "a": "\a", "e": "\x1b"}
        if ch in simple:
            return simple[ch]
        if ch == "0":
            digits = ""
            while len(digits) < 3 and self.i < len(self.text) and self.text[self.i] in "01234567":
                if len(digits) == 2 and digits[0] > "3":
                    break
                digits += self.text[self.i]
                self.i += 1
            if not digits:
                raise self.invalid("illegal octal escape sequence")
            return chr(int(digits, 8))
        if ch == "x":
            if self.text.startswith("{", self.i):
                end = self.text.find("}", self.i)
                digits = self.text[self.i + 1 : end] if end > 0 else ""
                self.i = end + 1
            else:
                digits = self.text[self.i : self.i + 2]
                self.i += 2
            if not digits or not all(c in "0123456789abcdefABCDEF" for c in digits) or int(digits, 16) > 0x10FFFF:
                raise self.invalid("illegal hexadecimal escape sequence")
            return chr(int(digits, 16))
        if ch == "u":
            unit = self.hex4()
            if 0xD800 <= unit <= 0xDBFF and self.text.startswith("\\u", self.i):
                saved = self.i
                self.i += 2
                low = self.hex4()
                if 0xDC00 <= low <= 0xDFFF:
                    return chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
                self.i = saved
            return chr(unit)
        if ch == "c":
            if self.i >= len(self.text):
                raise self.invalid("illegal control escape sequence")
            self.i += 1
            return chr(ord(self.text[self.i - 1]) ^ 64)
        if ch.isascii() and ch.isalnum():
            raise self.invalid(f"illegal/unsupported escape sequence \\{ch}")
        return ch

    def hex4(self) -> int:
        digits = self.text[self.i : self.i + 4]
        if len(digits) < 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise self.invalid("illegal Unicode escape sequence")
        self.i += 4
        return int(digits, 16)

    # -- character classes ------------------------------------------------------------------------------------------
    def char_class(self) -> str:
        """A class after its ``[``: ``[^...]`` negates the whole (its unions and intersections)."""
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        operands: list[str] = []
        items: list[str] = []
        first = True
        while True:
            ch = self.peek()
            if ch == "":
                raise self.invalid("unclosed character class")
            if ch == "]" and not first:
                self.i += 1
                break
            first = False
            if self.text.startswith("&&", self.i):
                self.i += 2
                if items:
                    operands.append("".join(items))
                items = []
                continue
            items.append(self.class_item())
        if items:
            operands.append("".join(items))
        if not operands:
            raise self.invalid("empty character class")
        body = "&&".join(f"[{o}]" for o in operands) if len(operands) > 1 else operands[0]
        return f"[{'^' if negated else ''}{body}]"

    def class_item(self) -> str:
        """One item of a class: a nested class, a predefined class, a character or a range."""
        ch = self.take()
        if ch == "[":
            return self.char_class()
        if ch == "\\":
            if self.text.startswith("Q", self.i):
                self.i += 1
                end = self.text.find("\\E", self.i)
                quoted = self.text[self.i :] if end < 0 else self.text[self.i : end]
                self.i = len(self.text) if end < 0 else end + 2
                return "".join(self.class_char(c) for c in quoted)
            letter = self.text[self.i] if self.i < len(self.text) else ""
            self.i += 1
            items = self.class_escape(letter)
            if items is not None:
                return f"[{items}]"
            if letter in ("b", "B", "A", "z", "Z", "G", "R", "X", "N", "k") or (letter.isdigit() and letter != "0"):
                raise self.invalid(f"illegal escape \\{letter} in a character class")
            low = self.char_escape(letter)
        else:
            low = ch
        return self.range_from(low)

    def range_from(self, low: str) -> str:
        """``low`` alone, or the range ``low-high`` when a ``-`` and a character follow (``-]`` is a literal)."""
        if self.peek() == "-":
            after = self.i + 1
            if after < len(self.text) and self.text[after] not in "][":
                self.i = after
                ch = self.take()
                if ch == "\\":
                    letter = self.text[self.i] if self.i < len(self.text) else ""
                    self.i += 1
                    if self.class_escape(letter) is not None:
                        raise self.invalid("illegal character range")
                    high = self.char_escape(letter)
                else:
                    high = ch
                if ord(high) < ord(low):
                    raise self.invalid("illegal character range")
                return self.class_range(low, high)
        return self.class_char(low)

    def class_char(self, ch: str) -> str:
        out = _set_escape(ch)
        if self.flags.case_insensitive and ch.isalpha():
            if self.flags.unicode_case:
                other = {ch.lower(), ch.upper()} - {ch}
                out += "".join(_set_escape(c) for c in sorted(other) if len(c) == 1)
            elif ch.isascii():
                out += _set_escape(ch.swapcase())
        return out

    def class_range(self, low: str, high: str) -> str:
        out = f"{_set_escape(low)}-{_set_escape(high)}"
        if self.flags.case_insensitive:
            if self.flags.unicode_case and not (low.isascii() and high.isascii()):
                raise self.refuse("a non-ASCII range in a pattern with case-insensitive Unicode matching")
            lo, hi = ord(low), ord(high)
            for start, end, shift in ((0x61, 0x7A, -32), (0x41, 0x5A, 32)):
                a, b = max(lo, start), min(hi, end)
                if a <= b:
                    out += f"{_set_escape(chr(a + shift))}-{_set_escape(chr(b + shift))}"
        return out


def _escape(ch: str) -> str:
    """A character as a literal outside a set."""
    escaped: str = regex.escape(ch)
    return escaped


def _set_escape(ch: str) -> str:
    """A character as a literal item of a ``regex`` version-1 set."""
    if ch.isascii() and ch.isalnum():
        return ch
    return f"\\U{ord(ch):08x}"


def translate(text: str, flags: int = 0, origin: str = "a regular expression") -> str:
    """``text``, a ``java.util.regex`` pattern compiled with ``flags`` (:data:`CASE_INSENSITIVE`,
    :data:`UNICODE_CASE`), as a ``regex`` pattern to compile with ``regex.VERSION1`` and no flags.

    :raises PatternError: naming the construct, when Java would refuse the pattern or walflow cannot match it exactly.
    """
    start = _Flags(case_insensitive=bool(flags & CASE_INSENSITIVE), unicode_case=bool(flags & UNICODE_CASE))
    return _Translator(text, start, origin).pattern()


def compile_java(text: str, flags: int = 0, origin: str = "a regular expression") -> regex.Pattern[str]:
    """:func:`translate`, compiled."""
    translated = translate(text, flags, origin)
    try:
        return regex.compile(translated, regex.VERSION1)
    except regex.error as exc:  # a construct the translation let through that regex refuses
        raise PatternError(f"{origin}: {text!r} is not a regular expression walflow can match ({exc})") from None
