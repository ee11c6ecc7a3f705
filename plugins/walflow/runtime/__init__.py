"""Running walflow on one machine and from a shell.

- :mod:`~walflow.runtime.embedded`: the private PostgreSQL cluster, Kafka-compatible broker and Airflow home
  (``python -m walflow.runtime.embedded up``);
- :mod:`~walflow.runtime.demo`: ``make demo``;
- :mod:`~walflow.runtime.cli`: the ``walflow`` command (``status``, ``reset``), and :mod:`~walflow.runtime.reset`.
"""
