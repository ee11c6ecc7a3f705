"""Reading lake tables without Spark (pyiceberg): for ``walflow status``, the demo, downstream DAGs and tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyiceberg.table import StaticTable


def read_hadoop_table(warehouse: str, namespace: str, table: str) -> Any | None:
    """A lake table of a Hadoop catalog opened with pyiceberg, or None if it does not exist.

    The Hadoop catalog keeps no catalog service: the table is ``<warehouse>/<namespace>/<table>``, and
    ``metadata/version-hint.text`` names its current metadata file. For REST, Hive or JDBC catalogs use
    ``pyiceberg.catalog.load_catalog`` instead.
    """
    folder = Path(warehouse) / namespace / table / "metadata"
    hint = folder / "version-hint.text"
    if not hint.exists():
        return None
    return StaticTable.from_metadata(str(folder / f"v{hint.read_text().strip()}.metadata.json"))
