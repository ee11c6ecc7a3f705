"""walflow: Debezium's PostgreSQL connector rebuilt in Python and orchestrated by Apache Airflow.

The subpackages follow the data, each importing only from those before it in this list (``tests/unit/test_layout.py``
holds the rule):

==============  ==================================================================================================
package         what it holds
==============  ==================================================================================================
``errors``      the named exceptions of every stage; ``names``: how topics and tables are named; ``resources``:
                the files shipped inside the package
``config``      what the operator declares: connector settings, connector files, patterns, filters, expressions
``source``      the source database: connections, publication, slot, locks, catalog, pgoutput, state, signals
``records``     Debezium's record format: value conversion, column transforms, table schemas, envelopes
``kafka``       the producer, topic administration and end-of-topic reads
``transforms``  Kafka Connect's and Debezium's single message transforms, run before records reach Kafka
``capture``     streaming batches, initial and incremental snapshots, setup, drift checks, schema facts, metrics
``lake``        the Spark job that applies the records to Iceberg (its executors import ``names``, ``errors``,
                ``kafka`` and parts of ``records`` only)
``airflow``     hooks, operators, sensors, triggers, the DAG factory: thin adapters over the stages above; a
                connector's status, which the command line and DAG files share
``admin``       the ``walflow`` command line: status, reset, the SQL scripts, the example connector
==============  ==================================================================================================

Nothing below ``airflow`` imports Airflow. The embedded development runtime (``make up``, ``make demo``) is not
part of the package: it is ``sandbox/`` of the repository.
"""

__version__ = "0.1.0"
