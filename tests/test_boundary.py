"""The Rust/Python boundary (`specreplay._core`): each crossing has one typed
shape. The configuration TypedDicts of `_core.pyi` name exactly the fields
the core accepts (so neither side can drift), bad values are errors that
name the field, requests cross as one Arrow batch with the columns of
`schema.REQUEST_COLUMNS`, and the background servers share one base."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from specreplay import _core
from specreplay.settings.config import ReplayConfig
from specreplay.errors import ConfigError
from specreplay.results.schema import REQUEST_COLUMNS, request_schema

STUB = Path(_core.__file__).with_name("_core.pyi")
LOAD: Any = {"mode": "concurrency", "concurrency": 1}
FAST: Any = {"ttft_ms": 1, "tpot_ms": 1, "reasoning_tokens": [2, 2], "content_tokens": [2, 2]}


def stub_keys(name: str) -> set[str]:
    """The keys a TypedDict of the stub declares."""
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}


def accepted_keys(message: str) -> set[str]:
    """The fields serde lists after an unknown one: what the core's struct has."""
    expected = message.split("unknown field `__nope__`, expected ", 1)[1]
    return set(re.findall(r"`(\w+)`", expected))


BODY = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": {"include_usage": True}}).encode()


def requests(url: str = "http://127.0.0.1:9/v1/chat/completions", n: int = 1) -> pa.RecordBatch:
    rows = [{"trace_id": f"r{i}", "api": "chat", "url": url, "body": BODY, "arrival_s": 0.0} for i in range(n)]
    return pa.RecordBatch.from_pylist(rows, schema=request_schema())


def start_error(spec: Any, batch: Any = None) -> str:
    with pytest.raises((ConfigError, TypeError)) as err:
        _core.start_point(spec, requests() if batch is None else batch)
    return str(err.value)


@pytest.mark.parametrize(
    ("typed_dict", "spec", "tag"),
    [
        ("RunSpec", {"load": LOAD, "__nope__": 1}, None),
        ("RateLoad", {"load": {"mode": "rate", "rate": 1, "__nope__": 1}}, "mode"),
        ("SpeedupLoad", {"load": {"mode": "speedup", "speedup": 1, "__nope__": 1}}, "mode"),
        ("ConcurrencyLoad", {"load": {**LOAD, "__nope__": 1}}, "mode"),
        ("Share", {"load": LOAD, "share": {"worker": 0, "workers": 1, "__nope__": 1}}, None),
    ],
)
def test_run_spec_typed_dicts_name_exactly_the_core_fields(typed_dict: str, spec: Any, tag: str | None) -> None:
    # The load variants' `mode` is serde's tag, not a field of the variant.
    assert accepted_keys(start_error(spec)) | ({tag} if tag else set()) == stub_keys(typed_dict)


def test_sim_and_proxy_typed_dicts_name_exactly_the_core_fields() -> None:
    with pytest.raises(ConfigError) as err:
        _core.SimServer(config={"__nope__": 1})  # type: ignore[typeddict-unknown-key]
    assert accepted_keys(str(err.value)) == stub_keys("SimConfig")
    with pytest.raises(ConfigError) as err:
        _core.SimServer(config={"capacity": {"__nope__": 1}})  # type: ignore[typeddict-unknown-key]
    assert accepted_keys(str(err.value)) == stub_keys("SimCapacity")
    with pytest.raises(ConfigError) as err:
        _core.CaptureProxy({"upstream": "http://127.0.0.1:9", "__nope__": 1})  # type: ignore[typeddict-unknown-key]
    assert accepted_keys(str(err.value)) == stub_keys("ProxyConfig")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"load": {"mode": "rate", "rate": -1}}, "run spec: load.rate: must be a positive number, got -1"),
        ({"load": {"mode": "rate", "rate": 1, "burstiness": 0}}, "run spec: load.burstiness: must be a positive number"),
        ({"load": {"mode": "concurrency", "concurrency": 0}}, "run spec: load.concurrency: must be at least 1"),
        ({"load": {"mode": "sometimes"}}, "run spec: load.mode: unknown variant `sometimes`"),
        ({"load": LOAD, "timeout_s": 0}, "run spec: timeout_s: must be a positive number, got 0"),
        ({"load": LOAD, "headers": [("a",)]}, "run spec: headers[0]: expected sequence of length 2"),
        ({"load": LOAD, "retries": -1}, "run spec: retries:"),
        ({}, "run spec: missing field `load`"),
    ],
)
def test_bad_run_spec_names_the_field(spec: Any, message: str) -> None:
    assert f"invalid configuration: {message}" in start_error(spec)


def test_bad_sim_and_proxy_config_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"sim: faults\.http_503: .*real number"):
        _core.SimServer(config={"faults": {"http_500": 0.1, "http_503": "often"}})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=r"capture: drain_s: must be a non-negative number, got -1"):
        _core.CaptureProxy({"upstream": "http://127.0.0.1:9", "drain_s": -1})
    with pytest.raises(ConfigError, match=r"capture: apis\.chat: expected a path"):
        _core.CaptureProxy({"upstream": "http://127.0.0.1:9", "apis": {"chat": "chat"}})
    with pytest.raises(ConfigError, match=r"capture: apis\.grpc: unknown variant `grpc`"):
        _core.CaptureProxy({"upstream": "http://127.0.0.1:9", "apis": {"grpc": "/x"}})
    with pytest.raises(ConfigError, match=r"capture: upstream: expected an http"):
        _core.CaptureProxy({"upstream": "ftp://h"})


def test_requests_cross_as_one_batch_with_the_schema_columns() -> None:
    assert request_schema().names == [c.name for c in REQUEST_COLUMNS]
    spec: Any = {"load": LOAD}
    assert "requests: expected an Arrow record batch" in start_error(spec, [("a", "chat", "http://h/v1", b"{}", 0.0)])
    assert "requests: body: missing column" in start_error(spec, requests().drop_columns(["body"]))
    as_text = requests().set_column(3, "body", pa.array(["{}"]))
    assert "requests: body: expected Binary, got Utf8" in start_error(spec, as_text)
    unknown = requests().append_column("session", pa.array(["s"]))
    assert "requests: session: unknown column" in start_error(spec, unknown)
    batch = requests()
    session = batch.set_column(batch.schema.get_field_index("session_id"), "session_id", pa.array(["s"]))
    assert "request r0: turn_index: missing" in start_error(spec, session)
    assert "request r0: api" in start_error(spec, requests().set_column(1, "api", pa.array(["grpc"])))


def test_a_point_runs_from_a_typed_spec_and_reports_typed_progress() -> None:
    with _core.SimServer(config=FAST) as sim:
        spec: Any = {"load": {"mode": "concurrency", "concurrency": 2}, "timeout_s": 30}
        run = _core.start_point(spec, requests(sim.url + "/chat/completions", n=3))
        rows = 0
        while (batch := run.next_batch(16, 0.25)) is not None:
            rows += batch.num_rows
        p = run.progress()
    assert rows == 3
    assert (p.scheduled, p.sent, p.finished, p.failed) == (3, 3, 3, 0)
    assert p.output_tokens == 3 * 4


def test_both_servers_share_the_background_server() -> None:
    with _core.SimServer(config=FAST) as sim, _core.CaptureProxy({"upstream": sim.url}) as proxy:
        for server, name in ((sim, "SimServer"), (proxy, "CaptureProxy")):
            assert isinstance(server, _core.BackgroundServer) and server.running
            assert server.url == f"http://{server.host}:{server.port}/v1"
            assert repr(server) == f'{name}(url="{server.url}", running)'
    assert not sim.running and not proxy.running and repr(proxy).endswith("stopped)")


def test_the_secret_header_list_is_the_core_one() -> None:
    assert _core.is_secret_header(" Authorization ") and _core.is_secret_header("X-API-KEY")
    assert not _core.is_secret_header("x-request-id")
    config = ReplayConfig(trace="t", headers={"Proxy-Authorization": "Basic c2VjcmV0", "X-Trace": "1"})
    assert config.to_metadata()["headers"] == {"Proxy-Authorization": "<redacted>", "X-Trace": "1"}


# Run in a child process whose address space leaves no room for a thread's
# stack: every runtime of the extension fails to start, and each call that
# needs one says so as an EngineError, twice (the failure does not poison it).
NO_THREADS = """
import json, resource, sys
import pyarrow as pa
from specreplay import _core
from specreplay.errors import EngineError
from specreplay.results.schema import request_schema

rows = [{"trace_id": "r0", "api": "chat", "url": "http://127.0.0.1:9/v1/chat/completions",
         "body": b"{}", "arrival_s": 0.0}]
batch = pa.RecordBatch.from_pylist(rows, schema=request_schema())
calls = {
    "engine": lambda: _core.start_point({"load": {"mode": "concurrency", "concurrency": 1}}, batch),
    "simulator": lambda: _core.SimServer(),
    "capture proxy": lambda: _core.CaptureProxy({"upstream": "http://127.0.0.1:9/v1"}),
}
size = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 20), resource.RLIM_INFINITY))
out = {}
for name, call in calls.items():
    for attempt in range(2):
        try:
            call()
            out.setdefault(name, []).append("started")
        except EngineError as e:
            out.setdefault(name, []).append("EngineError: " + str(e))
        except BaseException as e:
            out.setdefault(name, []).append(type(e).__name__ + ": " + str(e))
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(json.dumps(out))
"""


def test_a_runtime_that_cannot_start_is_an_engine_error() -> None:
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", NO_THREADS], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    outcomes = json.loads(child.stdout.strip().splitlines()[-1])
    assert set(outcomes) == {"engine", "simulator", "capture proxy"}
    for name, results in outcomes.items():
        assert len(results) == 2
        for result in results:
            assert result.startswith(f"EngineError: could not start the {name}'s tokio runtime"), result
            assert "spawn" in result, result
def test_server_model_typed_dict_names_exactly_the_core_fields() -> None:
    model: Any = {"frontend_us": 0, "prefill_us_per_token": 1, "step_us": 1, "batch_step_cost": 0, "__nope__": 1}
    with pytest.raises(ConfigError) as err:
        _core.predict_point(model, {"load": LOAD}, [requests()], [0], 0)
    assert accepted_keys(str(err.value)) == stub_keys("ServerModel")
    output: Any = {**model, "output": [{"api": "chat", "reasoning": [1], "content": [1], "__nope__": 1}]}
    del output["__nope__"]
    with pytest.raises(ConfigError) as err:
        _core.predict_point(output, {"load": LOAD}, [requests()], [0], 0)
    assert accepted_keys(str(err.value)) == stub_keys("OutputClass")
