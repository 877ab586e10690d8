"""Loading a results file for analysis.

A results file is an Arrow IPC file (Feather v2): `pandas.read_feather` and
`pyarrow.ipc.open_file` read it too. `load` adds one thing: the run metadata,
decoded to `str`, in `DataFrame.attrs`, so the analysis functions can find the
run's sweep points and max_tokens without being told.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pandas as pd
import pyarrow as pa

CONFIG_KEY = "specreplay.config"
VALIDITY_KEY = "specreplay.validity"


def load(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The results at `path` as a DataFrame, with the file's schema metadata
    (`specreplay.version`, `specreplay.config`, …) in `df.attrs`.

    pandas' default conversion applies: an integer column with nulls becomes
    float64 with NaN, list columns hold numpy arrays.
    """
    with pa.OSFile(os.fspath(path), "rb") as source:
        table = pa.ipc.open_file(source).read_all()
    df: pd.DataFrame = table.to_pandas()
    metadata = table.schema.metadata or {}
    df.attrs = {k.decode(): v.decode() for k, v in metadata.items()}
    return df


def run_config(df: pd.DataFrame) -> dict[str, Any]:
    """The resolved run config stored by `load` in `df.attrs`; {} when absent."""
    text = df.attrs.get(CONFIG_KEY)
    if not text:
        return {}
    config = json.loads(text)
    if not isinstance(config, dict):
        raise ValueError(f"{CONFIG_KEY} is not a JSON object")
    return config


def config_points(df: pd.DataFrame) -> list[dict[str, Any]] | None:
    """The config's `points` list (point, mode, value), or None when unknown."""
    points = run_config(df).get("points")
    return list(points) if isinstance(points, list) else None
