"""One bounded streaming batch: slot → pgoutput decoding → Debezium events → Kafka → slot advance.

- :mod:`~walflow.capture.stream.batch`: the batch's session (connections, lock, checks, its record);
- :mod:`~walflow.capture.stream.checks`: whether it may stream, the slot, drift, where a round reads up to, the
  slot's advance and health;
- :mod:`~walflow.capture.stream.resume`: where a batch resumes reading (after a crash's rollback, after a failover);
- :mod:`~walflow.capture.stream.snapshots`: its incremental and blocking snapshots and the Kafka signal channel;
- :mod:`~walflow.capture.stream.rounds`: the rounds (chunks selected, the slot read, flush, saves, advance);
- :mod:`~walflow.capture.stream.peek`: one round's read of the slot through a server-side cursor, in blocks;
- :mod:`~walflow.capture.stream.dispatch`: each decoded message routed to transactions, signals, snapshot windows,
  watermarks and the record builder, in one place;
- :mod:`~walflow.capture.stream.relations`: the captured tables' schemas, cached per relation;
- :mod:`~walflow.capture.stream.changes` and :mod:`~walflow.capture.stream.transactions`: Debezium's records of the
  changes, messages and heartbeats, and the transaction metadata.
"""

from walflow.capture.stream.batch import StreamBatch

__all__ = ["StreamBatch"]
