"""Type stubs of the Rust extension `specreplay._core` (checked by mypy stubtest).

What crosses the boundary, and how:
- configuration (`RunSpec`, `SimConfig`, `ProxyConfig`): a plain mapping of
  the TypedDict below, read by serde into the core's struct of the same
  fields (rust/specreplay-core); unknown keys and bad values raise
  `ConfigError` naming the field's path (`run spec: load.rate: ...`). The
  TypedDicts exist for the type checker only (`@type_check_only`); a test
  (tests/test_boundary.py) keeps their keys equal to what the core accepts.
- rows: Arrow record batches through the C data interface, both ways
  (requests in: `schema.REQUEST_COLUMNS`; results out: `schema.ENGINE_COLUMNS`).
- everything else: the small frozen classes below, with named fields.
"""

from types import TracebackType
from typing import ClassVar, Literal, Protocol, final, type_check_only

from typing_extensions import NotRequired, Self, TypedDict, disjoint_base

from specreplay.literals import Arrival, SessionMode
from specreplay.errors import ConfigError as ConfigError
from specreplay.errors import EngineError as EngineError
from specreplay.errors import SpecreplayError as SpecreplayError
from specreplay.errors import StreamFormatError as StreamFormatError

__version__: str

_Api = Literal["chat", "completions", "responses", "anthropic"]

def now_us() -> int: ...
def set_realtime(wanted: bool) -> None:
    """Whether the engine's threads (and the embedded simulator's) ask for
    real-time scheduling, for the rest of the process, over
    SPECREPLAY_REALTIME. Threads already started keep theirs."""
def is_secret_header(name: str) -> bool:
    """Whether a header's value is a secret (never recorded or written), in any case."""

# --- configuration --------------------------------------------------------------

@type_check_only
class RateLoad(TypedDict):
    """Open loop at `rate` requests/s."""

    mode: Literal["rate"]
    rate: float
    arrival: NotRequired[Arrival]
    burstiness: NotRequired[float]

@type_check_only
class SpeedupLoad(TypedDict):
    """Open loop at the trace's own arrival offsets divided by `speedup`."""

    mode: Literal["speedup"]
    speedup: float

@type_check_only
class ConcurrencyLoad(TypedDict):
    """Closed loop: `concurrency` requests in flight."""

    mode: Literal["concurrency"]
    concurrency: int

@type_check_only
class RunSpec(TypedDict):
    """One sweep point (rust/specreplay-core/src/engine/spec.rs `RunSpec`)."""

    load: RateLoad | SpeedupLoad | ConcurrencyLoad
    headers: NotRequired[list[tuple[str, str]]]
    num_requests: NotRequired[int | None]
    duration_s: NotRequired[float | None]
    max_concurrency: NotRequired[int | None]
    warmup: NotRequired[int]
    timeout_s: NotRequired[float | None]
    stall_timeout_s: NotRequired[float | None]
    retries: NotRequired[int]
    seed: NotRequired[int]
    server_stamps: NotRequired[bool]
    chunk_text: NotRequired[bool]
    preconnect: NotRequired[bool | None]
    sessions: NotRequired[SessionMode]
    live_history: NotRequired[bool]
    start_at_us: NotRequired[int | None]
    share: NotRequired[Share | None]

@type_check_only
class Share(TypedDict):
    """One worker's share of a point in a distributed replay
    (rust/specreplay-core/src/engine/spec.rs `Share`; the engine's feed deals
    the units out, `share::Dealer`)."""

    worker: int
    workers: int

@type_check_only
class SimConfig(TypedDict, total=False):
    """The simulated server (rust/specreplay-core/src/sim/config.rs `SimConfig`,
    docs/simulator.md); every key has a default."""

    model: str
    seed: int
    ttft_ms: float
    prefill_us_per_token: float
    tpot_ms: float
    reasoning_tokens: list[int] | tuple[int, int]
    content_tokens: list[int] | tuple[int, int]
    reasoning_field: Literal["reasoning_content", "reasoning", "none"]
    spec_draft_len: int
    spec_acceptance: float
    spec_step_cost: float
    send_timestamps: bool
    max_model_len: int
    capacity: SimCapacity
    fixed_length_reasoning: bool
    faults: dict[str, float]
    fault_stall_ms: float
    fault_slow_headers_ms: float
    fault_retry_after_s: int
    fault_oversized_bytes: int
    models: list[SimModel]
    image_patch_px: int
    image_merge: int
    image_url_size: list[int] | tuple[int, int]
    audio_tokens_per_s: float
    video_tokens: int
    tool_call_rate: float
    embedding_dim: int

@type_check_only
class SimModel(TypedDict, total=False):
    """One more model the simulator serves (`[[sim.models]]`, sim/config.rs
    `ModelSpec`): its name, and the speed keys it overrides."""

    name: str
    ttft_ms: float
    prefill_us_per_token: float
    tpot_ms: float

@type_check_only
class SimCapacity(TypedDict, total=False):
    """The simulator's capacity model (rust/specreplay-core/src/sim/capacity.rs
    `Capacity`); `{}` turns it on with the defaults."""

    max_num_seqs: int
    kv_cache_tokens: int
    batch_step_cost: float
    batch_step_factors: list[float]
    prefix_caching: bool
    max_num_batched_tokens: int

@type_check_only
class ProxyConfig(TypedDict):
    """The capture proxy (rust/specreplay-core/src/proxy/mod.rs `ProxyConfig`)."""

    upstream: str
    drain_s: NotRequired[float]
    apis: NotRequired[dict[str, str]]
    session_header: NotRequired[str | None]

# --- rows ---------------------------------------------------------------------------

@type_check_only
class ArrowArrayExportable(Protocol):
    """A record batch: anything with `__arrow_c_array__` (a `pyarrow.RecordBatch`)."""

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]: ...

@final
class ArrowBatch:
    """Finished requests as one Arrow record batch (`pyarrow.record_batch(b)`)."""

    @property
    def num_rows(self) -> int: ...
    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]: ...
    def __len__(self) -> int: ...

# --- replay ------------------------------------------------------------------------

@final
class EngineProgress:
    """The engine's live counters at one moment."""

    @property
    def scheduled(self) -> int: ...
    @property
    def sent(self) -> int: ...
    @property
    def finished(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...

@final
class EngineScheduling:
    """The scheduling the point's engine threads actually got (not what was
    asked): `SCHED_FIFO:<priority>` or `SCHED_OTHER`."""

    @property
    def pacer(self) -> str | None: ...
    @property
    def workers(self) -> str | None: ...
    @property
    def realtime_asked(self) -> bool: ...
    @property
    def pacer_late_max_us(self) -> int | None:
        """The pacing thread's largest wake-up overshoot (µs); None: no pacer, or it never slept."""
    @property
    def pacer_late_p99_us(self) -> int | None:
        """The upper edge (µs) of the log2 bucket holding its overshoots' 99th percentile."""
    @property
    def pacer_held_us(self) -> list[tuple[int, int]]:
        """Each of its waits that ended 250 µs or more later than planned: (planned end, actual end), wall-clock µs; the first 1,024."""
    @property
    def pacer_held_dropped(self) -> int:
        """How many more held-up waits there were than `pacer_held_us` keeps."""
    @property
    def cpu_watched(self) -> bool:
        """Whether every CPU was watched for the machine's stalls (open loop, real-time pacer)."""
    @property
    def cpu_held_us(self) -> list[tuple[int, int]]:
        """The spans a CPU was taken from the engine (its real-time watch woke 250 µs or more late, unseen by the guest's run queue): (planned wake, actual wake), wall-clock µs, earliest first; the first 1,024."""
    @property
    def cpu_held_dropped(self) -> int:
        """How many more there were than `cpu_held_us` keeps."""

@final
class EngineRun:
    """One sweep point running on the engine's own threads."""

    def next_batch(self, max_rows: int = 4096, wait_s: float = 0.25) -> ArrowBatch | None: ...
    def progress(self) -> EngineProgress: ...
    def scheduling(self) -> EngineScheduling:
        """The scheduling its threads got (read once the point is over)."""
    def cancel(self) -> None: ...
    def feed(self, requests: ArrowArrayExportable) -> None:
        """More requests of a point started with `feed=True`, in order (a
        session's turns together, in one batch)."""
    def wants_more(self) -> bool:
        """Whether the point wants more requests fed now (its look-ahead is not full)."""
    def end_lap(self) -> None:
        """The trace's next pass begins: what is fed from now on is its next lap."""
    def end_feed(self) -> None:
        """Nothing more will be fed."""

def start_point(spec: RunSpec, requests: ArrowArrayExportable, feed: bool = False) -> EngineRun:
    """Starts a point: `requests` has the columns of `schema.REQUEST_COLUMNS`:
    all of its requests (looped over for more), or with `feed` the first ones
    (more through `EngineRun.feed`)."""

# --- prompts -------------------------------------------------------------------------

@final
class Filler:
    """Prompt text synthesized from block ids (docs/trace-format.md, `prompt_blocks`)."""

    MAX_TOKENS: ClassVar[int]
    def __new__(cls, words: list[str] | None = None) -> Filler: ...
    @property
    def words(self) -> list[str]: ...
    def text(self, tokens: int, block_size: int, hash_ids: list[int], seed: int = 0) -> str: ...

# --- decoding ------------------------------------------------------------------------

@disjoint_base
class ResponseCounts:
    """What a response said, as a captured trace record's `response` keeps it
    (token counts: the server's; None: never reported)."""

    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def completion_tokens(self) -> int | None: ...
    @property
    def reasoning_tokens(self) -> int | None: ...
    @property
    def cached_tokens(self) -> int | None: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...

@final
class DecodedResponse(ResponseCounts):
    """A whole response decoded by `decode_response`."""

    @property
    def complete(self) -> bool: ...
    @property
    def predicted_tokens(self) -> int | None: ...

def decode_response(api: str, body: bytes, content_type: str) -> DecodedResponse:
    """Usage, finish reason, error, completeness and llama.cpp timings of one response."""

@final
class Fetched:
    """One whole HTTP answer (`fetch`): any status, a 404 included."""
    @property
    def status(self) -> int: ...
    @property
    def reason(self) -> str:
        """The status's canonical reason ("Not Found"); empty for an unknown code."""
    @property
    def content_type(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def sent_us(self) -> int:
        """`now_us()` just before the request went out."""
    @property
    def headers_us(self) -> int:
        """`now_us()` when the response's head had come."""

def fetch(method: str, url: str, headers: list[tuple[str, str]], body: bytes | None = None, timeout_s: float = 5.0) -> Fetched:
    """Sends one request and reads its whole answer within `timeout_s`, on the
    calling thread (no connection kept). Raises ConfigError for a URL, method
    or header no request can carry, TimeoutError when the answer is not whole
    in time, ConnectionError (with the causes) when the connection fails."""

def reconcile_chunk_tokens(batch: object) -> ArrowBatch:
    """A tokenizer's per-chunk counts (`weights`, list<int64>; with `chunk_channel`,
    `output_tokens`, `reasoning_tokens`) split to add up to the server's count:
    `chunk_tokens` and `reasoning_tokens`, row for row (engine/apportion.rs)."""

# --- servers in the background --------------------------------------------------------

@disjoint_base
class BackgroundServer:
    """What `SimServer` and `CaptureProxy` share: the address, `stop()`, `with`."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def url(self) -> str: ...
    @property
    def running(self) -> bool: ...
    def stop(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

@final
class SimServer(BackgroundServer):
    """The simulated reasoning-model server, serving in the background.
    `embedded`: it runs beside the engine in the replaying process, so its
    thread is real-time where the engine's are (docs/benchmarks.md)."""

    def __new__(cls, host: str = "127.0.0.1", port: int = 0, config: SimConfig | None = None, embedded: bool = False) -> SimServer: ...

def sim_knee_rate(config: SimConfig, prompt_tokens: int, output_tokens: int) -> float:
    """The capacity model's knee, requests/s (docs/simulator.md, "The knee")."""

@type_check_only
class OutputClass(TypedDict):
    """Natural output lengths of one prompt class: paired samples."""

    api: str
    max_prompt_tokens: NotRequired[int]
    reasoning: list[int]
    content: list[int]

@type_check_only
class ServerModel(TypedDict, total=False):
    """A calibrated server (`specreplay_core::predict::ServerModel`; docs/predict.md)."""

    frontend_us: float
    frontend_jitter_us: float
    co_launch: bool
    cached_co_launch: float | None
    prefill_us_per_token: float
    prefill_us_per_cached_token: float
    step_us: float
    batch_step_cost: float
    batch_step_factors: list[float]
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    kv_cache_tokens: int | None
    prefix_caching: bool
    template_cached_tokens: int
    prompt_tokens_per_word: float
    steps_per_chunk: float
    spec_acceptance: list[float]
    spec_step_cost: float
    speed_spread: float
    speed_window_us: float
    usage_probe: bool
    output: list[OutputClass]
    seed: int

@final
class PredictStats:
    """What a predicted point's server went through."""

    @property
    def peak_running(self) -> int: ...
    @property
    def peak_waiting(self) -> int: ...
    @property
    def peak_kv_tokens(self) -> int: ...
    @property
    def iterations(self) -> int: ...
    @property
    def span_us(self) -> int: ...

def predict_point(
    model: ServerModel, spec: RunSpec, requests: list[ArrowArrayExportable], laps: list[int], start_us: int
) -> tuple[list[ArrowBatch], PredictStats]:
    """One sweep point predicted on a virtual clock: the engine's batches (docs/predict.md)."""

def sim_prompt_tokens(requests: ArrowArrayExportable) -> list[int]:
    """Each request's prompt length as the simulator counts it (a word, 4 per chat message)."""

@final
class CapturedRequest:
    """A request through the capture proxy, once its body was read."""

    @property
    def seq(self) -> int: ...
    @property
    def arrival_us(self) -> int: ...
    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def api(self) -> _Api | None: ...
    @property
    def body(self) -> bytes: ...
    @property
    def error(self) -> str | None: ...
    @property
    def session(self) -> str | None:
        """The value of the configured session header, when the request has it."""

@final
class CapturedResponse(ResponseCounts):
    """Its response once ended, decoded: a captured trace record's `response`."""

    @property
    def seq(self) -> int: ...
    @property
    def status(self) -> int: ...
    @property
    def ttfb_us(self) -> int | None: ...
    @property
    def end_us(self) -> int: ...
    @property
    def answer(self) -> str | None:
        """The answer's text (content, then tool-call arguments); never written."""

@final
class CaptureProxy(BackgroundServer):
    """The forwarding half of `specreplay capture`, serving in the background."""

    def __new__(cls, config: ProxyConfig, host: str = "127.0.0.1", port: int = 0) -> CaptureProxy: ...
    def next_events(self, max: int = 256, wait_s: float = 0.25) -> list[CapturedRequest | CapturedResponse] | None: ...
