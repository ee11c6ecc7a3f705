"""Claims: which connector and which topic own a lake table.

A lake table is written by exactly one topic of one connector, like a slot and a topic prefix belong to one
connector. Two writers of one table would each commit only their own offsets, so each would re-read the other's
topic from offset 0 and apply its events again (or delete its rows on ``walflow reset --lake``). The owner is
recorded in the table's properties when walflow creates it (and added to a table an earlier walflow created), and
checked before a run writes anything: a table another connector or topic owns is refused, as are two topics of
one run that map to one table (nested topic prefixes, a source table named like another's changelog, a name
equal to another's hashed lake name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from walflow.errors import LakeError
from walflow.lake import columns as C

TABLE = "table"
CHANGELOG = "changelog"


def claim(connector: str, topic: str, kind: str) -> dict[str, str]:
    """The table properties that record the owner of a lake table (``kind``: :data:`TABLE` or :data:`CHANGELOG`)."""
    return {C.CONNECTOR_PROPERTY: connector, C.TOPIC_PROPERTY: topic, C.KIND_PROPERTY: kind}


def check_claim(ident: str, properties: Mapping[str, str], connector: str, topic: str, kind: str) -> None:
    """Refuse to write ``ident`` for ``topic`` of ``connector`` when its properties name another owner.

    A table without a claim (created by an earlier walflow) is taken: the caller records the claim with its next
    change.

    :raises LakeError: naming the owner, the cause and the fix.
    """
    owner = properties.get(C.CONNECTOR_PROPERTY)
    if owner is not None and owner != connector:
        raise LakeError(
            f"lake table {ident} belongs to connector {owner!r} (table property {C.CONNECTOR_PROPERTY}), not to "
            f"{connector!r}: two connectors write the same lake namespace. Nothing was written. Give one of them its "
            "own 'walflow.lake.namespace' (or warehouse/catalog); each connector's lake tables are its own, as its "
            "slot and topic prefix are."
        )
    fed_by = properties.get(C.TOPIC_PROPERTY)
    role = properties.get(C.KIND_PROPERTY, TABLE)
    if fed_by is not None and (fed_by != topic or role != kind):
        what = "the changelog of topic" if role == CHANGELOG else "fed by topic"
        raise LakeError(
            f"lake table {ident} is {what} {fed_by!r}, so topic {topic!r} cannot write it as its {kind}: two source "
            "tables map to one lake table name (a table named like another's '<name>__changelog', or like another's "
            "hashed name). Nothing was written. Rename one of the source tables or exclude it (table.exclude.list), "
            "or apply into another 'walflow.lake.namespace'."
        )


def shared_tables(targets: Iterable[tuple[str, str, str]]) -> dict[str, list[tuple[str, str]]]:
    """Lake table names that more than one (topic, kind) of a run would write, from (topic, kind, table name)."""
    writers: dict[str, list[tuple[str, str]]] = {}
    for topic, kind, name in targets:
        writers.setdefault(name, []).append((topic, kind))
    return {name: sorted(w) for name, w in writers.items() if len(w) > 1}


def shared_table_error(name: str, writers: list[tuple[str, str]]) -> LakeError:
    listed = " and ".join(f"topic {topic!r} ({kind})" for topic, kind in writers)
    return LakeError(
        f"{listed} would all write lake table {name!r}: their source tables map to one lake table name (nested topic "
        "prefixes such as 'shop' and 'shop.eu', a source table named like another's '<name>__changelog', or one named "
        "like another's hashed lake name). None of them was applied; the other topics were. Give the connectors topic "
        "prefixes that do not nest, rename or exclude one of the tables (table.exclude.list), or set "
        "'walflow.lake.namespace' apart."
    )
