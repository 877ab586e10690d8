"""specreplay: replay LLM request traces against inference servers, measured in Rust."""

from specreplay._core import __version__
from specreplay.errors import ConfigError, EngineError, SpecreplayError, StreamFormatError, TraceError
from specreplay.replay import replay
from specreplay.results import load

__all__ = ["ConfigError", "EngineError", "SpecreplayError", "StreamFormatError", "TraceError", "__version__", "load", "replay"]
