"""Debezium's record format: PostgreSQL values converted to Kafka Connect's, column transforms, each table's
schema, key and envelope, and the record's JSON.

- :mod:`~walflow.records.convert` with :mod:`~walflow.records.temporal`, :mod:`~walflow.records.decimals` and
  :mod:`~walflow.records.arrays`: column values;
- :mod:`~walflow.records.column_rules`: truncation, masking, hashing, source-type propagation;
- :mod:`~walflow.records.events`: table schemas, keys, envelopes (with :mod:`~walflow.records.rowcode`, the rows'
  generated functions), and :mod:`~walflow.records.envelope`: the ``source`` block, transaction and heartbeat records;
- :mod:`~walflow.records.facts`: the schema topic's fact format, shared with the lake.

This package's root imports nothing: the lake job's executors import ``decimals``, ``temporal`` and ``facts``.
"""
