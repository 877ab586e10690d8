"""docs/results.md stays in step with the code: every column, token source and
validity code is documented, and the by-hand pandas snippet agrees with
`summarize`."""

import math
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import T0, results_frame, results_table

from specreplay import summary, validity
from specreplay.schema import COLUMNS, TOKEN_SOURCES

DOC = Path(__file__).resolve().parent.parent / "docs" / "results.md"
TEXT = DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", [c.name for c in COLUMNS])
def test_every_column_is_documented(name: str) -> None:
    assert f"| `{name}` |" in TEXT


@pytest.mark.parametrize("name", list(TOKEN_SOURCES))
def test_every_token_source_is_documented(name: str) -> None:
    assert f"| `{name}` |" in TEXT


@pytest.mark.parametrize(
    "code",
    ["reasoning_ate_budget", "estimated_tokens", "multi_token_chunks", "client_saturated", "engine_delay", "queue_growing", "error_rate", "too_few_requests"],
)
def test_every_validity_code_is_documented(code: str) -> None:
    assert f"| `{code}` |" in TEXT
    assert f'code="{code}"' in Path(validity.__file__).read_text(encoding="utf-8")


@pytest.mark.parametrize("field", [f.name for f in fields(validity.Thresholds)])
def test_every_threshold_and_its_default_is_documented(field: str) -> None:
    default = getattr(validity.Thresholds(), field)
    assert f"| `{field}` | {default} |" in TEXT


def test_the_by_hand_snippet_matches_summarize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)[-1]
    assert "by_hand" in snippet
    rows: list[dict[str, Any]] = [{"warmup": True}]
    for i in range(12):
        chunks = [(40_000 + 7_000 * i, 5, "reasoning")] + [(90_000 + 9_000 * j + 100 * i, 1 + j % 3, "content") for j in range(6)]
        connect = {"connect_us": 900 + 70 * i} if i < 4 else {}
        rows.append({"sent_us": T0 + 100_000 * i, "scheduled_us": T0 + 100_000 * i - 30 * i, "chunks": chunks, **connect})
    rows.append({"sent_us": T0 + 1_250_000, "error_kind": "timeout", "chunks": None, "end_us": T0 + 1_300_000})
    table = results_table(rows)
    with pa.OSFile(str(tmp_path / "results.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    exec(snippet, scope)
    expected = summary.summarize(results_frame(rows)).set_index("point").loc["rate=8"]
    assert len(scope["by_hand"]) > 10
    for name, value in scope["by_hand"].items():
        assert not math.isnan(float(value)), name
        assert float(value) == pytest.approx(float(expected[name])), name
