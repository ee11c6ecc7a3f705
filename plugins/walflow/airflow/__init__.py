"""Airflow adapters of walflow: hooks own connections, operators are thin task units over the domain code."""
