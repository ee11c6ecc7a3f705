"""walflow's translation of Java's regular expressions (walflow.config.javaregex) against ``java.util.regex`` itself,
in the JVM the differential suite runs Debezium in: for every pattern and name of ``tests/compat/regex_cases.py``,
Java's ``Pattern.compile(pattern, flags).matcher(name).matches()`` and walflow's answer agree, or walflow refused the
pattern before matching anything, naming the construct (and then only the constructs the module's docstring lists),
or both refused a pattern Java does not accept."""

from __future__ import annotations

from tests.compat.debezium import java_available, start_jvm
from tests.compat.regex_cases import CASES
from tests.requires import unavailable
from walflow.config.javaregex import compile_java
from walflow.errors import PatternError

#: what walflow refuses on purpose: each refusal must name one of these
REFUSED_CONSTRUCTS = (
    "multi-line mode",
    "UNICODE_CHARACTER_CLASS",
    "\\G",
    "\\X",
    "\\N{name}",
    "\\b{g}",
    "back-reference in a case-insensitive pattern",
    "which walflow does not know",
)


def test_walflow_matches_names_as_java_util_regex_does() -> None:
    if not java_available():
        unavailable("java is not installed", "make up installs Java 17 from Debian")
    start_jvm()
    import jpype

    java_pattern = jpype.JClass("java.util.regex.Pattern")
    pairs = refused = agreed = 0
    differences: list[str] = []
    for text, flags, names in CASES:
        try:
            java = java_pattern.compile(text, flags)
        except Exception as exc:
            java = None
            java_error = str(exc).splitlines()[0]
        try:
            ours = compile_java(text, flags, "test")
        except PatternError as exc:
            pairs += len(names)
            if java is None:
                agreed += len(names)  # both refuse a pattern Java does not accept
            elif any(construct in str(exc) for construct in REFUSED_CONSTRUCTS):
                refused += len(names)
            else:
                differences.append(f"{text!r} (flags {flags}): walflow refused it ({exc}), Java accepts it")
            continue
        if java is None:
            differences.append(f"{text!r} (flags {flags}): Java refuses it ({java_error}), walflow accepts it")
            pairs += len(names)
            continue
        for name in names:
            pairs += 1
            expected = bool(java.matcher(name).matches())
            got = ours.fullmatch(name) is not None
            if expected == got:
                agreed += 1
            else:
                differences.append(f"{text!r} (flags {flags}) on {name!r}: Java {expected}, walflow {got}")
    print(f"java.util.regex against walflow: {pairs} pairs, {agreed} agreed, {refused} refused by name")
    assert pairs >= 300, pairs
    assert not differences, "\n".join(differences)
    assert refused < pairs // 10, refused  # refusals stay the exception


#: list values as configurations write them: escaped commas, escaped backslashes, spaces, empty items
LISTS = [
    r"public\.a\,b",
    "a,b",
    r"a\\,b",
    " a , b ,",
    r"a\,b,c",
    r"a\\\,b",
    "a,,b",
    r"\,",
    r"public\.orders, inventory\..*",
    r"x\{1\,3\},y",
    r"(a|b)\,c, d",
    r"a\.b\\\\,c",
    r"[\,;]x",
]


def test_lists_split_as_debeziums_strings_list_of_regex() -> None:
    """Every list value splits into the items Debezium's own ``Strings.listOfRegex`` gives (the one splitter of its
    include and exclude lists), ``\\,`` and ``\\\\`` included."""
    if not java_available():
        unavailable("java is not installed", "make up installs Java 17 from Debian")
    start_jvm()
    import jpype

    from walflow.config.values import split_list

    strings = jpype.JClass("io.debezium.util.Strings")
    for value in LISTS:
        debezium = [str(p.pattern()) for p in strings.listOfRegex(jpype.JString(value), 2)]
        assert split_list(value) == debezium, value
