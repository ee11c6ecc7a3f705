"""Single message transforms: Kafka Connect's and Debezium's, run on walflow's records before they reach Kafka.

:mod:`~walflow.transforms.record` holds a record as Kafka Connect's transforms see it (topic, key and value with
their schemas, headers), decoded from and encoded to the JSON converter's bytes; :mod:`~walflow.transforms.connect`
and :mod:`~walflow.transforms.debezium` are the transforms; :mod:`~walflow.transforms.chain` builds the configured
chain with its predicates; :mod:`~walflow.transforms.producer` runs it on every record a producer is given.
"""
