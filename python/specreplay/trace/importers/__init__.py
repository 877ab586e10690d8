"""`specreplay import FORMAT FILE`: public traces into the specreplay trace
format (docs/trace-format.md, "Importing public traces").

- `formats`: one reader per format, file rows → `Row`s;
- `rows`: what readers yield, the streaming file readers, field checks;
- `sessions`: block ids for prompts whose source has none, conversations
  sharing their history;
- `pipeline`: `import_trace`, rows → arrival order → records → file;
- `report`: the summary.
"""

from specreplay.trace.importers.formats import FORMATS, Options, parse_timestamp_us
from specreplay.trace.importers.pipeline import import_trace
from specreplay.trace.importers.outcome import ImportReport

__all__ = ["FORMATS", "ImportReport", "Options", "import_trace", "parse_timestamp_us"]
