"""Incremental snapshots in watermark windows, and the signals that drive them (run by the stream task).

- :mod:`~walflow.capture.incremental.snapshots`: :class:`IncrementalSnapshots`, what the stream batch holds;
- :mod:`~walflow.capture.incremental.state`: what the parts share (progress, chunks, outcomes, counts);
- :mod:`~walflow.capture.incremental.signals`: what each signal does; :mod:`~walflow.capture.incremental.queue`:
  the signals queued and waiting, and the progress saved;
- :mod:`~walflow.capture.incremental.selection`: chunks selected between watermarks, read by
  :mod:`~walflow.capture.incremental.chunks` (with :mod:`~walflow.capture.incremental.conditions`, the checks of a
  signal's condition);
- :mod:`~walflow.capture.incremental.windows`: the chunks' windows closed as the stream reads on.
"""

from walflow.capture.incremental.snapshots import IncrementalSnapshots
from walflow.capture.incremental.state import STATE_KEY, WATERMARK_PREFIX

__all__ = ["STATE_KEY", "WATERMARK_PREFIX", "IncrementalSnapshots"]
