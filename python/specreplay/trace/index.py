"""What replay knows about a trace before its first request goes out, from
one validating pass over the file (`scan_trace`): every line checked (so a
bad line late in a huge file stops the run before it starts, with its file,
line and field), the file's digest, what the target preflight and the
usage probe need, and where each session's turns are. No record is kept:
the requests are read again, a few at a time, as the engine asks for them
(`feed.Feeder`).

Memory: about 8 bytes per record (the duplicate-id check), plus per session
its id and 12 bytes per turn (where its turns are in the file): bounded by
the sessions, not by the size of the records.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path

from specreplay.errors import TraceError
from specreplay.samples import trace_path
from specreplay.trace.records import TraceReader, TraceRecord

#: Bytes of body a synthesized prompt token takes, rounded up: a word and
#: its space (`specreplay_core::prompt`); the Mooncake conversation trace's
#: 144.8M tokens shaped into 651 MB of bodies, 4.5 bytes a token.
SYNTHESIZED_BYTES_PER_TOKEN = 5


@dataclass
class SessionTurns:
    """Where a session's turns are in the file, in order."""

    offsets: array[int] = field(default_factory=lambda: array("q"))
    lines: array[int] = field(default_factory=lambda: array("l"))


@dataclass
class TraceIndex:
    path: str
    sha256: str
    #: Request records in the file.
    records: int
    has_arrivals: bool
    #: The APIs the trace uses (the auth headers depend on them).
    apis: frozenset[str]
    #: Every body names a model (else the target's first model is used).
    all_have_model: bool
    #: The first chat or completions record: what the usage probe sends.
    probe: TraceRecord | None
    #: Session id → where its records are, for sessions (ids in the trace).
    sessions: dict[str, SessionTurns]
    #: Byte offsets of every record that is not its session's first, ascending.
    later_turns: array[int]
    #: Units: records on their own plus sessions (what rate and speedup schedule).
    units: int
    #: The file as scanned, to notice a change while it is replayed.
    size: int
    mtime_ns: int
    #: The file's bytes plus the prompt text its `prompt_blocks` records
    #: synthesize: what its requests weigh once shaped (a compact Mooncake
    #: trace of 4.9 MB shapes into 651 MB of bodies).
    shaped_size: int

    @property
    def has_sessions(self) -> bool:
        return bool(self.sessions)

    def check_unchanged(self) -> None:
        """Raises `TraceError` when the file changed since it was scanned."""
        st = Path(self.path).stat()
        if (st.st_size, st.st_mtime_ns) != (self.size, self.mtime_ns):
            raise TraceError(self.path, None, None, "changed while it was being replayed (size or modification time differs from the validating pass)")


def scan_trace(path: str | Path) -> TraceIndex:
    """Reads and checks the whole trace once, keeping only its index.
    Raises `TraceError` naming file, line and field for the first problem.
    A `sample:NAME` is the packaged sample's file (`specreplay.samples`)."""
    path = trace_path(path)
    reader = TraceReader(path)
    sessions: dict[str, SessionTurns] = {}
    later = array("q")
    apis: set[str] = set()
    all_have_model = True
    probe: TraceRecord | None = None
    has_arrivals: bool | None = None
    units = 0
    synthesized = 0
    p = Path(path)
    st = p.stat() if p.is_file() else None
    for offset, rec in reader:
        if has_arrivals is None:
            has_arrivals = rec.arrival is not None
        apis.add(rec.api)
        all_have_model = all_have_model and "model" in rec.body
        if probe is None and rec.api in ("chat", "completions"):
            probe = rec
        if rec.prompt_blocks is not None:
            synthesized += rec.prompt_blocks.tokens * SYNTHESIZED_BYTES_PER_TOKEN
        if rec.session_id is None:
            units += 1
            continue
        turns = sessions.get(rec.session_id)
        if turns is None:
            turns = sessions[rec.session_id] = SessionTurns()
            units += 1
        else:
            later.append(offset)
        turns.offsets.append(offset)
        turns.lines.append(rec.line)
    assert st is not None  # the reader raised otherwise
    st_after = p.stat()
    if (st.st_size, st.st_mtime_ns) != (st_after.st_size, st_after.st_mtime_ns):
        raise TraceError(str(path), None, None, "changed while it was being read")
    return TraceIndex(
        path=str(path), sha256=reader.sha256, records=reader.records, has_arrivals=bool(has_arrivals),
        apis=frozenset(apis), all_have_model=all_have_model, probe=probe, sessions=sessions, later_turns=later,
        units=units, size=st.st_size, mtime_ns=st.st_mtime_ns, shaped_size=st.st_size + synthesized,
    )
