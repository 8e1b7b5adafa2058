"""Copies the data the infrastructure checks read into ``tests/infra``: resource types and azd's schema.

The Bicep compiler's type definitions (bicep-types format) for the API versions orderflow's templates
use, gzipped so a clean checkout has them without the shared data folder. ``python -m
tests.infra.vendor_azure_types [SHARED]`` re-copies them, and azd's ``azure.yaml`` schema, from ``SHARED``
(default ``../shared`` beside the checkout: ``azure-types/`` and ``schemas/``); to vendor another version,
add it to :data:`VENDORED` and run it. The output is
byte-for-byte reproducible (gzip with no timestamp), so a re-run changes nothing unless the source did.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_SHARED = REPO.parent / "shared"
TARGET = HERE / "azure-types"
AZURE_YAML_SCHEMA = HERE / "schemas" / "azure.yaml.json"

VENDORED: tuple[tuple[str, str, str], ...] = (
    ("web", "microsoft.web", "2025-03-01"),
    ("storage", "microsoft.storage", "2026-04-01"),
    ("servicebus", "microsoft.servicebus", "2026-01-01"),
    ("cosmos-db", "microsoft.documentdb", "2026-03-15"),
    ("applicationinsights", "microsoft.insights", "2020-02-02"),
    ("monitor_1", "microsoft.insights", "2026-03-01"),
    ("monitor_1", "microsoft.insights", "2026-01-01"),
    ("monitor_1", "microsoft.insights", "2023-01-01"),
    ("operationalinsights", "microsoft.operationalinsights", "2026-03-01"),
    ("msi", "microsoft.managedidentity", "2024-11-30"),
    ("authorization", "microsoft.authorization", "2022-04-01"),
    ("resources_11", "microsoft.resources", "2025-04-01"),
)
"""(provider folder, namespace, API version) of each vendored ``types.json``, as laid out at the source."""


def vendored_path(folder: str, namespace: str, version: str) -> Path:
    """Where one vendored ``types.json.gz`` lives."""
    return TARGET / folder / namespace / version / "types.json.gz"


def compress(data: bytes) -> bytes:
    """gzip without a timestamp or file name: the same input gives the same bytes."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def vendor(shared: Path = DEFAULT_SHARED) -> list[Path]:
    """Copy every :data:`VENDORED` file and the ``azure.yaml`` schema from ``shared``; returns the files
    written.

    Raises:
        FileNotFoundError: a listed version, or the schema, is missing at ``shared``.
    """
    AZURE_YAML_SCHEMA.write_bytes((shared / "schemas" / "azure.yaml.json").read_bytes())
    written = [AZURE_YAML_SCHEMA]
    source = shared / "azure-types"
    for folder, namespace, version in VENDORED:
        data = (source / folder / namespace / version / "types.json").read_bytes()
        target = vendored_path(folder, namespace, version)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(compress(data))
        written.append(target)
    return written


if __name__ == "__main__":
    for path in vendor(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_SHARED):
        print(path.relative_to(REPO))
