"""Type stubs of the Rust extension `specreplay._core` (checked by mypy stubtest)."""

from types import TracebackType
from typing import final

from specreplay.errors import ConfigError as ConfigError
from specreplay.errors import EngineError as EngineError
from specreplay.errors import SpecreplayError as SpecreplayError
from specreplay.errors import StreamFormatError as StreamFormatError

__version__: str

def now_us() -> int: ...

@final
class ArrowBatch:
    """Finished requests as one Arrow record batch (`pyarrow.record_batch(b)`)."""

    @property
    def num_rows(self) -> int: ...
    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]: ...
    def __len__(self) -> int: ...

@final
class EngineRun:
    """One sweep point running on the engine's own threads."""

    def next_batch(self, max_rows: int = 4096, wait_s: float = 0.25) -> ArrowBatch | None: ...
    def progress(self) -> tuple[int, int, int, int, int]: ...
    def cancel(self) -> None: ...
    @property
    def started_us(self) -> int: ...

def decode_response(api: str, body: bytes, content_type: str) -> dict[str, int | str | bool | None]:
    """Usage, finish reason, error and completeness of one recorded response."""

def start_point(spec_json: str, requests: list[tuple[str, str, str, bytes, float]]) -> EngineRun: ...

@final
class SimServer:
    """The simulated reasoning-model server, serving in the background."""

    def __new__(
        cls, host: str = "127.0.0.1", port: int = 0, config: dict[str, object] | None = None
    ) -> SimServer: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def url(self) -> str: ...
    @property
    def running(self) -> bool: ...
    def stop(self) -> None: ...
    def __enter__(self) -> SimServer: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...
