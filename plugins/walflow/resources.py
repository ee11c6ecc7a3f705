"""Files shipped inside the package (the lake jobs' applications, the SQL scripts, the example connector), found
with :mod:`importlib.resources` wherever walflow is installed: a checkout, a virtual environment, an Airflow image."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from walflow.errors import WalflowError


def package_file(package: str, name: str) -> Path:
    """The path of ``name`` inside ``package`` on the file system.

    spark-submit and psql take paths, so a file inside a zipped install cannot be handed to them.

    :raises WalflowError: when the file is missing or not on the file system.
    """
    found = resources.files(package).joinpath(name)
    path = Path(str(found))
    if not isinstance(found, Path) or not path.is_file():
        raise WalflowError(
            f"{package}/{name} is not a file on disk ({found}): install walflow as a regular wheel "
            "(pip install walflow), not zipped"
        )
    return path


def package_text(package: str, name: str) -> str:
    """The text of ``name`` inside ``package``."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")
