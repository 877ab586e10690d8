"""specreplay: replay LLM request traces against inference servers, measured in Rust."""

from specreplay._core import ConfigError, SpecreplayError, __version__
from specreplay.reading import load

__all__ = ["ConfigError", "SpecreplayError", "__version__", "load"]
