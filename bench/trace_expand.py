"""Writes a compact trace with every prompt written out: each record's
`prompt_blocks` becomes the text replay would synthesize from them, in the
body (one user message, or `prompt`/`input`). The result is the kind of trace
`import --tokenizer` or a capture makes (Mooncake's conversation trace: 651
MB), to measure replay on a trace whose size is its text. Streams: one record
in memory at a time. Asserts nothing.

    .venv/bin/python bench/trace_expand.py mc.jsonl mc-text.jsonl
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from bench_util import write_result
from specreplay.trace.shaping import body_with_prompt
from specreplay.trace.records import iter_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("output")
    args = parser.parse_args()
    n = 0
    with Path(args.output).open("w", encoding="utf-8") as out:
        for rec in iter_trace(args.trace):
            out.write(replace(rec, body=body_with_prompt(rec), prompt_blocks=None).to_json() + "\n")
            n += 1
    figures = {"trace": args.trace, "records": n, "bytes": Path(args.output).stat().st_size}
    print(json.dumps(figures))
    print(f"wrote {write_result('trace-expand', figures)}")


if __name__ == "__main__":
    main()
