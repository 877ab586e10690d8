"""The HTML report: built from simulated runs, self-contained, deterministic,
and rendered by a real headless browser (Debian's `chromium`) with every
chart drawn and no console error. The screenshot's pixels are checked for
the charts' colours."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import browser
import pytest
from click.testing import CliRunner

import specreplay
from specreplay.present import report
from specreplay.cli import cli
from specreplay.present.report import svg

BROWSER_TIMEOUT_S = 90


def test_nice_ticks() -> None:
    assert svg.nice_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert svg.nice_ticks(3.2, 17.9) == [5, 10, 15]
    assert svg.nice_ticks(3.2, 11.9) == [4, 6, 8, 10]
    assert svg.nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert svg.fmt_tick(25_000) == "25k"


def test_report_is_self_contained_and_deterministic(sim_runs: dict[str, Path], tmp_path: Path) -> None:
    page = report.build(str(sim_runs["spec"]), vs=str(sim_runs["base"]))
    assert page == report.build(str(sim_runs["spec"]), vs=str(sim_runs["base"]))
    # Nothing to fetch: no src/href/url()/@import (URLs appear only as text: the run's target).
    assert not re.search(r"\b(src|href)\s*=|url\(|@import", page)
    assert "Content-Security-Policy" in page
    for heading in ("Validity", "Configuration", "Summary", "Comparison", "Plots"):
        assert f">{heading}</h2>" in page
    assert page.index("<h2>Validity</h2>") < page.index("<h2>Summary</h2>") < page.index(">Plots</h2>")
    # 9 of the client's, and 3 of the servers' (load; acceptance over time and by position).
    assert page.count('<svg class="plot"') == 12
    assert "ngram vs baseline" in page


def test_report_command_writes_the_file(sim_runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", str(sim_runs["base"]), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert "<h2>Comparison</h2>" not in page  # one run: nothing to compare
    # 9 of the client's and the server's load; no speculation, no acceptance charts.
    assert page.count('<svg class="plot"') == 10
    # What the engine threads got, one line among the configuration's facts.
    assert re.search(r"<dt>scheduling</dt><dd>pacer (none|SCHED_[A-Z]+(:\d)?), workers SCHED_[A-Z]+(:\d)? \(real-time (not )?asked\)</dd>", page)


# --- the browser ----------------------------------------------------------------


def chromium() -> str:
    found = browser.find()
    if found is None:
        if browser.may_skip(os.environ):
            pytest.skip(f"{browser.SKIP_VAR}=1")
        pytest.fail(browser.missing_message(os.geteuid() == 0, shutil.which("apt-get") is not None))
    return found


def run_browser(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "profile"
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S, check=False)


def console_messages(stderr: str) -> list[str]:
    """What the page wrote to the console (chromium logs it as INFO:CONSOLE)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit RGB/RGBA, non-interlaced PNG (what chromium writes)."""
    blob = path.read_bytes()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(blob):
        (length,) = struct.unpack(">I", blob[pos : pos + 4])
        kind, body = blob[pos + 4 : pos + 8], blob[pos + 8 : pos + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, color_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and color_type in (2, 6) and interlace == 0
    bpp = 3 if color_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line[j] for i in range(0, stride, bpp) for j in range(i, i + 3)))
        prev = line
    return width, height, rows


def colour_count(rows: list[bytes], hex_colour: str, tolerance: int = 40) -> int:
    target = bytes.fromhex(hex_colour.lstrip("#"))
    n = 0
    for row in rows[::2]:
        for i in range(0, len(row), 6):
            if all(abs(row[i + k] - target[k]) <= tolerance for k in range(3)):
                n += 1
    return n


@pytest.fixture(scope="module")
def report_file(sim_runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    report.write(path, str(sim_runs["spec"]), vs=str(sim_runs["base"]))
    return path


def test_the_page_loads_in_chromium_with_every_chart_and_no_console_error(report_file: Path, tmp_path: Path) -> None:
    result = run_browser(["--virtual-time-budget=5000", "--dump-dom", report_file.as_uri()], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    root = re.search(r"<html[^>]*>", result.stdout)
    assert root is not None, result.stdout[:500]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', root.group(0)))
    assert attrs.get("data-plots-rendered") == attrs.get("data-plots") == "12", attrs
    assert json.loads(attrs["data-errors"].replace("&quot;", '"')) == []
    assert attrs["data-resources"] == "0"  # nothing fetched
    assert console_messages(result.stderr) == []


def test_the_screenshot_shows_the_charts(report_file: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    result = run_browser(["--window-size=1280,2600", f"--screenshot={shot}", report_file.as_uri()], tmp_path)
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    width, height, rows = png_pixels(shot)
    assert (width, height) == (1280, 2600)
    # The two runs' colours (blue: baseline, vermillion: ngram) are drawn, in quantity.
    assert colour_count(rows, svg.PALETTE[0]) > 500
    assert colour_count(rows, svg.PALETTE[1]) > 500
    assert console_messages(result.stderr) == []


def test_the_servers_metrics_have_a_table_and_charts(sim_runs: dict[str, Path]) -> None:
    page = report.build(str(sim_runs["spec"]), vs=str(sim_runs["base"]))
    server = page[page.index('<h2 id="server">Server metrics</h2>') : page.index('<h2 id="plots">')]
    assert "acceptance rate" in server and "running mean" in server
    # The charts sit after TPOT and tokens/s over time, on the same time axis.
    order = [page.index(f'<figure id="{pid}">') for pid in ("tpot-time", "throughput-time", "server-load", "acceptance-time", "acceptance-position")]
    assert order == sorted(order)
    bars = page[page.index('<figure id="acceptance-position">') : page.index("</figure>", page.index('<figure id="acceptance-position">'))]
    # conftest.SIM_SPEC: 4 drafts per step; the baseline drafts nothing and has no bars.
    assert [f"draft {i}" in bars for i in range(1, 6)] == [True, True, True, True, False]
    assert bars.count("<rect class=\"series\"") == 4
    # Without server metrics: no section, no server charts.
    plain = specreplay.load(sim_runs["base"])
    plain.attrs.pop("specreplay.server_metrics")
    page = report.build(plain)
    assert 'id="server"' not in page and 'id="server-load"' not in page and page.count('<svg class="plot"') == 9
