"""Distributed replay on a real Ray cluster on this machine: a head node and
one more node process (Ray's own `cluster_utils.Cluster`, 127.0.0.1, one CPU
each), the embedded simulator as the target. Opt-in: `make test-ray`
installs Ray and runs them (`-m ray`); `make test` leaves them out
(`-m "not ray"`), and without Ray they skip."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import specreplay
from specreplay.analysis import validity
from specreplay.settings.config import ReplayConfig
from specreplay.run.plan import Progress
from specreplay.run.replay import Hooks, run_replay
from specreplay.results.files import read_table

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
REASONING = str(ROOT / "traces" / "reasoning-prompts.jsonl")
POISSON = str(ROOT / "traces" / "poisson-200.jsonl")
FAST_SIM: dict[str, Any] = {"ttft_ms": 20, "prefill_us_per_token": 0, "tpot_ms": 2, "reasoning_tokens": [20, 40], "content_tokens": [5, 10]}


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Any]:
    """A head and a second node; every test's workers are spread over both."""
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def replay(tmp_path: Path, name: str, hooks: Hooks | None = None, **options: Any) -> pd.DataFrame:
    options.setdefault("sim", FAST_SIM)
    options.setdefault("trace", REASONING)
    config = ReplayConfig(output=str(tmp_path / f"{name}.arrow"), ray="local", **options)
    config.validate()
    result = run_replay(config, hooks)
    assert not result.interrupted
    return specreplay.load(result.path)


def p50(df: pd.DataFrame, a: str, b: str) -> float:
    return float((df[b] - df[a]).median())


def test_two_workers_apply_the_load_of_one(two_nodes: Any, tmp_path: Path) -> None:
    options: dict[str, Any] = {"rate": [40.0], "num_requests": 80, "seed": 5}
    one = replay(tmp_path, "one", workers=1, **options)
    two = replay(tmp_path, "two", workers=2, **options)
    # The same rows, the same schema, every request once.
    assert len(one) == len(two) == 80
    assert read_table(tmp_path / "one.arrow").schema.remove_metadata() == read_table(tmp_path / "two.arrow").schema.remove_metadata()
    assert sorted(two["request_index"]) == list(range(80))
    assert sorted(one["trace_id"]) == sorted(two["trace_id"])
    assert one["error_kind"].isna().all() and two["error_kind"].isna().all()
    # Dealt out in turn, on two distinct nodes.
    assert two.groupby("worker")["request_index"].apply(lambda s: sorted(s % 2)[0] == sorted(s % 2)[-1]).all()
    workers = json.loads(two.attrs["specreplay.workers"])
    assert len({w["node_id"] for w in workers["workers"]}) == 2
    assert set(two["worker"]) == {w["worker"] for w in workers["workers"]}
    # The clocks: measured per point, small on one machine (one clock source).
    (point,) = workers["points"]
    driver_nice = os.getpriority(os.PRIO_PROCESS, 0)
    for w in point["workers"]:
        # The driver's niceness, not Ray's 15, where lowering it is allowed (as root).
        assert w["nice"] == driver_nice if os.geteuid() == 0 else w["nice"] in (driver_nice, 15)
        assert 0 < w["rtt_us"] < 1_000_000 and w["uncertainty_us"] == (w["rtt_us"] + 1) // 2
        assert abs(w["offset_us"]) <= w["uncertainty_us"] + 2_000
    # The same schedule: every request due at the same time after the start,
    # to within the clock offsets (a few ms on a loaded machine).
    due_one = (one.set_index("request_index")["scheduled_us"] - one["scheduled_us"].min()).sort_index()
    due_two = (two.set_index("request_index")["scheduled_us"] - two["scheduled_us"].min()).sort_index()
    assert (due_one - due_two).abs().max() < 5_000
    # The same figures within noise: TTFT and TPOT come from the simulator's settings.
    for a, b, tolerance in (("sent_us", "first_token_us", 0.25), ("first_token_us", "end_us", 0.25)):
        assert abs(p50(two, a, b) / p50(one, a, b) - 1) < tolerance, (a, b)
    assert abs(two["output_tokens"].sum() / one["output_tokens"].sum() - 1) < 0.1
    # Each worker's send lag is reported by name.
    found = {f.code: f for f in validity.check(two)}
    assert "worker_send_lag" in found and all(w in found["worker_send_lag"].message for w in set(two["worker"]))


def test_closed_loop_concurrency_is_split(two_nodes: Any, tmp_path: Path) -> None:
    df = replay(tmp_path, "closed", workers=2, concurrency=[4], num_requests=24)
    assert sorted(df["request_index"]) == list(range(24))
    assert df["error_kind"].isna().all()
    assert df.groupby("worker").size().to_dict() == {w: 12 for w in set(df["worker"])}


@pytest.mark.parametrize("load", [{"concurrency": [4]}, {"rate": [30.0], "num_requests": 54}])
def test_sessions_stay_whole_on_one_worker_and_wait_for_their_turns(two_nodes: Any, tmp_path: Path, load: dict[str, Any]) -> None:
    """A trace of interleaved conversations, streamed by each worker: every
    session is sent by one worker, turn after turn (dependent sessions, the
    default), and together the workers send the whole point."""
    trace = tmp_path / "sessions.jsonl"
    records = [
        {"id": f"s{s}t{t}", "session_id": f"s{s}", "arrival": 0.1 * (s + 4 * t), "body": {"messages": [{"role": "user", "content": f"q{s}.{t}"}]}}
        for t in range(3)
        for s in range(12)
    ]
    records.sort(key=lambda r: r["arrival"])
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    df = replay(tmp_path, "sessions", trace=str(trace), workers=2, **load)
    expected = load.get("num_requests", 36)
    assert sorted(df["request_index"]) == list(range(expected))
    assert df["error_kind"].isna().all()
    # Every session on one worker, on every pass over the trace (a later
    # pass's session is named `<id>#<pass>`); the sessions dealt in turn.
    recorded = df["session_id"].str.partition("#")[0]
    assert (df.groupby(recorded)["worker"].nunique() == 1).all()
    assert df["worker"].nunique() == 2
    assert recorded.groupby(df["worker"]).nunique().to_dict() == {w: 6 for w in set(df["worker"])}
    # A later turn went out after its predecessor ended (on the same machine's clock).
    for _, session in df.groupby(["session_id", df["trace_id"].str.partition("#")[2]]):
        session = session.sort_values("turn_index")
        assert (session["sent_us"].to_numpy()[1:] >= session["end_us"].to_numpy()[:-1]).all()


class KillOneWorker(Hooks):
    """Kills worker 1's process once some requests have finished."""

    def __init__(self, clusters: list[Any]) -> None:
        self.clusters = clusters
        self.killed = False

    def progress(self, progress: Progress) -> None:
        if not self.killed and progress.finished >= 6:
            os.kill(self.clusters[0].identities[1]["pid"], signal.SIGKILL)
            self.killed = True


def test_a_killed_worker_is_accounted_for(two_nodes: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specreplay.run.distributed import driver

    clusters: list[Any] = []
    original = driver.Cluster.__init__

    def remember(self: Any, *args: Any) -> None:
        original(self, *args)
        clusters.append(self)

    monkeypatch.setattr(driver.Cluster, "__init__", remember)
    hooks = KillOneWorker(clusters)
    both = replay(tmp_path, "killed", hooks, workers=2, rate=[10.0, 20.0], num_requests=40)
    assert hooks.killed
    lost_worker = clusters[0].identities[1]["worker"]
    df = both[both["point"] == "rate=10"]
    # Nothing lost from the file: every scheduled request is a row.
    assert sorted(df["request_index"]) == list(range(40))
    lost = df[df["error_kind"] == "worker_lost"]
    assert len(lost) > 0 and set(lost["worker"]) == {lost_worker}
    assert set(lost["request_index"] % 2) == {1}
    assert lost["sent_us"].isna().all() and (lost["chunk_count"] == 0).all()
    # The survivor's rows are all measured.
    survivor = df[df["worker"] != lost_worker]
    assert len(survivor) == 20 and survivor["error_kind"].isna().all()
    # The run is flagged invalid.
    found = [f for f in validity.check(both) if f.code == "worker_lost"]
    assert len(found) == 1 and found[0].level == "error" and found[0].count == len(lost) and found[0].point == "rate=10"
    # The next point of the sweep runs on the workers that are left.
    after = both[both["point"] == "rate=20"]
    assert sorted(after["request_index"]) == list(range(40))
    assert after["error_kind"].isna().all() and set(after["worker"]) == set(survivor["worker"])
    assert [len(p["workers"]) for p in json.loads(both.attrs["specreplay.workers"])["points"]] == [2, 1]


def test_cli_run_and_ctrl_c_keeps_every_finished_row(tmp_path: Path) -> None:
    """The issue's command (its own local Ray instance), interrupted: every
    worker stops, every finished row is kept, the exit code says so."""
    out = tmp_path / "dist.arrow"
    sim = tmp_path / "sim.toml"
    sim.write_text("ttft_ms = 20\nprefill_us_per_token = 0\ntpot_ms = 2\nreasoning_tokens = [20, 40]\ncontent_tokens = [5, 10]\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "specreplay", "replay", POISSON, "--speedup", "1", "--ray", "--workers", "2", "--sim-config", str(sim), "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 120
        for line in iter(proc.stdout.readline, b""):
            lines.append(line.decode())
            if "point 1/1" in lines[-1] or time.monotonic() > deadline:
                break
        time.sleep(4.0)  # the trace lasts ~50 s: some rows finish, most do not
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    text = "".join(lines) + output.decode()
    assert proc.returncode == 130, text
    assert "Ray worker(s): w0@" in text
    df = specreplay.load(out)
    assert 0 < len(df) < 200
    assert df["error_kind"].isna().sum() > 0
    assert set(df["error_kind"].dropna()) <= {"cancelled"}
    assert df["worker"].nunique() == 2
    assert not Path(f"{out}.partial").exists()


def _process_tree(root: int) -> set[int]:
    """`root` and every process descended from it (Ray's GCS, raylet, agents and workers)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def _listening_addresses(pids: set[int]) -> dict[str, set[str]]:
    """Per listening TCP address (IPv4 or IPv6, as the kernel shows it, hex),
    the names of the processes in `pids` holding it (/proc/net/tcp{,6}, state 0A)."""
    listening: dict[str, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                listening[fields[9]] = fields[1].rsplit(":", 1)[0]
    found: dict[str, set[str]] = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            inode = link[len("socket:[") : -1] if link.startswith("socket:[") else None
            if inode in listening:
                found.setdefault(listening[inode], set()).add(name)
    return found


# 127.0.0.1 as /proc/net/tcp shows it, and as tcp6 shows ::1 and ::ffff:127.0.0.1.
LOOPBACK_HEX = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}


def test_local_ray_listens_on_loopback_only(tmp_path: Path) -> None:
    """`--ray` without an address: nothing the run starts (the driver, GCS,
    raylet, agents, workers, the embedded simulator) listens outside loopback."""
    out = tmp_path / "local.arrow"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specreplay", "replay", POISSON, "--speedup", "1", "--ray", "--workers", "2", "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 120
        for line in iter(proc.stdout.readline, b""):
            lines.append(line.decode())
            if "point 1/1" in lines[-1] or time.monotonic() > deadline:
                break
        time.sleep(2.0)  # the workers' engines are sending: every server is up
        tree = _process_tree(proc.pid)
        found = _listening_addresses(tree)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    text = "".join(lines) + output.decode()
    assert "Ray worker(s): w0@127.0.0.1" in text, text
    names = set().union(*found.values()) if found else set()
    # Ray's own servers were seen, so the check looked at the right processes.
    assert {"gcs_server", "raylet"} <= names, found
    exposed = {address: who for address, who in found.items() if address not in LOOPBACK_HEX}
    assert exposed == {}, f"listening outside loopback: {exposed}"
