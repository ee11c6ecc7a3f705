"""Reading the source's changes into records on Kafka: what the operators run.

- :mod:`~walflow.capture.context`: what one task derives once from its configuration and hands down;
- :mod:`~walflow.capture.setup`: a connector's setup step (checks, publication, slot, initial snapshot), with
  :mod:`~walflow.capture.drift` (what it captures, checked against what it set up) and
  :mod:`~walflow.capture.schema_facts` (table definitions for the lake);
- :mod:`~walflow.capture.snapshot`, :mod:`~walflow.capture.snapshot_tables`, :mod:`~walflow.capture.snapshot_workers`:
  the consistent initial snapshot, in one process or several;
- :mod:`~walflow.capture.stream`: one bounded streaming batch, its dispatcher and its records;
  :mod:`~walflow.capture.batches` records what it did;
- :mod:`~walflow.capture.incremental`:
  incremental snapshots in watermark windows, and the checks of their conditions;
- :mod:`~walflow.capture.emitter`: the ``r`` records of both kinds of snapshot;
- :mod:`~walflow.capture.metrics`: Debezium's metrics of one task's work.

The modules keep the order ``tests/unit/test_layout.py``'s ``CAPTURE_LAYERS`` gives (docs/layout.md draws it).
"""
