"""specreplay: replay LLM request traces against inference servers, measured in Rust."""

from specreplay._core import __version__
from specreplay.comparison import compare
from specreplay.errors import ConfigError, EngineError, InvalidRunError, ResultsError, SpecreplayError, StreamFormatError, TraceError
from specreplay.replay import replay
from specreplay.results import load
from specreplay.summary import summarize

__all__ = [
    "ConfigError",
    "EngineError",
    "InvalidRunError",
    "ResultsError",
    "SpecreplayError",
    "StreamFormatError",
    "TraceError",
    "__version__",
    "compare",
    "load",
    "replay",
    "summarize",
]
