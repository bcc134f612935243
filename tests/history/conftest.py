"""One SparkSession for every Spark test (start-up costs seconds); only modules that ask for the
``spark`` fixture start it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker.language import Publication
from wfm.history.landing import Landing
from wfm.history.spark import spark_session
from wfm.history.store import HistoryStore


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return spark_session("local[2]", shuffle_partitions=2)


@pytest.fixture
def store(tmp_path: Path, spark: SparkSession) -> HistoryStore:
    return HistoryStore(tmp_path / "store", spark)


def land(store: HistoryStore, rows: list[tuple[str, float, Publication]]) -> None:
    """Append (id, time, publication) rows to the store's landing log as one sealed segment."""
    with Landing(store.landing) as landing:
        for id, time, publication in rows:
            landing.append(publication, time, "tester", id)
