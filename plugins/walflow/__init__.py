"""walflow: Debezium's PostgreSQL connector rebuilt in Python and orchestrated by Apache Airflow.

The domain modules (config, pgoutput, convert, events, source, stream, kafka) import nothing from Airflow;
the Airflow adapters live in :mod:`walflow.airflow`.
"""

__version__ = "0.1.0"
