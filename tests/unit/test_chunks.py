"""A buffered incremental-snapshot chunk: what streamed changes inside its window record about it."""

from __future__ import annotations

from types import SimpleNamespace

from walflow.capture.incremental.progress import Chunk, row_key
from walflow.capture.incremental.windows import WatermarkWindows
from walflow.records.events import FieldSpec


def _chunk(ids: list[int]) -> Chunk:
    key = FieldSpec(index=0, name="id", converter=SimpleNamespace(convert=int), toast_value=None)  # type: ignore[arg-type]
    table = SimpleNamespace(name="public.t")
    return Chunk(
        id="c1",
        table=table,
        rows=[[str(i), "v"] for i in ids],
        dedupe=[key],
        cursor_before=("public.t", None, None, False, None),
        in_window=True,
    )  # type: ignore[arg-type]


def test_changes_inside_the_window_record_only_the_chunks_own_rows() -> None:
    """However many rows a transaction committed inside the window changes, the chunk keeps at most its own rows'
    identities as stale: memory stays bounded by the chunk, and those rows are the ones dropped."""
    chunk = _chunk([3, 4, 5])
    assert chunk.identities() == {row_key([str(i), "v"], chunk.dedupe) for i in (3, 4, 5)}
    state = SimpleNamespace(config=None, chunks={chunk.id: chunk})  # only the chunks matter to on_change
    snapshots = WatermarkWindows(state, None, None, None, "db", str)  # type: ignore[arg-type]
    snapshots.on_change("public.t", *({"id": i, "v": "x"} for i in range(1, 100_001)), xid=7)
    snapshots.on_change("public.other", {"id": 3, "v": "x"}, xid=7)  # another table's change names none of them
    assert chunk.stale == {row_key([str(i), "v"], chunk.dedupe) for i in (3, 4, 5)}
    rows, dropped = chunk.current()
    assert rows == [] and dropped == 3
    untouched = _chunk([1, 2])
    state.chunks = {untouched.id: untouched}
    snapshots.on_change("public.t", {"id": 9, "v": "x"}, None, xid=7)
    assert untouched.stale == set() and untouched.current() == (untouched.rows, 0)
