"""specreplay: replay LLM request traces against inference servers, measured in Rust."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from specreplay.errors import ConfigError, EngineError, InvalidRunError, ResultsError, SpecreplayError, StreamFormatError, TraceError

if TYPE_CHECKING:
    from specreplay._core import __version__
    from specreplay.comparison.compare import compare
    from specreplay.run.replay import replay
    from specreplay.results.files import load
    from specreplay.analysis.summary import summarize

#: The public names that need the extension, pandas or pyarrow: imported on
#: first use (PEP 562), so that `import specreplay.cli` (every command,
#: `--help` first) does not pay for them.
_LAZY = {
    "__version__": "specreplay._core",
    "compare": "specreplay.comparison.compare",
    "replay": "specreplay.run.replay",
    "load": "specreplay.results.files",
    "summarize": "specreplay.analysis.summary",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'specreplay' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
