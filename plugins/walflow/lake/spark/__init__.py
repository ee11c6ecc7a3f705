"""The lake jobs' applications, shipped as package data: spark-submit runs ``apply_changes.py`` and
``maintain_lake.py`` from the installed package (:func:`walflow.resources.package_file`), with
``log4j2.properties`` as the driver's logging settings."""
