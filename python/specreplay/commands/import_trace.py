"""`specreplay import`: public traces into the specreplay trace format."""

from __future__ import annotations

from pathlib import Path

import click

from specreplay.errors import ConfigError
from specreplay.trace.importers import FORMATS, Options, import_trace
from specreplay.trace.text import Tokenizer

_FORMAT_HELP = "\n".join(f"\b\n  {name:9} {desc}" for name, (desc, _) in FORMATS.items())


@click.command("import", help=f"""Convert a public trace FILE of FORMAT into a specreplay trace.

Where the trace gives only token counts, the record keeps the prompt as
blocks (the source's hash_ids, or fresh ids; a conversation's turns extend
each other) and replay synthesizes their text: equal blocks get equal text,
so prefix caching behaves as in the original, and the trace stays about the
size of its source. The output length becomes max_tokens + min_tokens +
ignore_eos. Lengths follow a documented approximation and records are
marked "approximate"; --tokenizer writes the text out instead, with exact
lengths. Formats:

{_FORMAT_HELP}
""")
@click.argument("format", type=click.Choice(list(FORMATS)), metavar="FORMAT")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Trace file to write.")
@click.option("--block-size", type=int, help="Tokens per hash_ids block (default 512; bailian 16).")
@click.option("--time-unit", type=click.Choice(["ms", "s"]), help="Unit of Mooncake/Bailian timestamps (default ms; bailian s).")
@click.option("--tokenizer", type=click.Path(dir_okay=False, exists=True), help="HF tokenizer.json: exact prompt lengths (pip install 'specreplay[tokenizer]').")
@click.option("--api", type=click.Choice(["chat", "completions"]), default="chat", show_default=True, help="API of the written requests (completions avoids chat-template tokens).")
@click.option("--model", help="Model name to put in every body.")
@click.option("--limit", type=click.IntRange(min=1), help="Keep only the first N usable rows.")
@click.option("--skip-invalid", is_flag=True, help="Skip malformed rows (counted and reported) instead of stopping at the first.")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), default=0, show_default=True, help="Seed of the synthesized text.")
@click.option("--default-output-tokens", type=click.IntRange(min=1),
              help="Output length of requests whose source gives none (single-turn ShareGPT, vLLM rows without output_tokens). Without it they set none.")
@click.option("--max-prompt-tokens", type=click.IntRange(min=1), help="Cap on prompt length (tokens): longer prompts are dropped or truncated (--over-limit).")
@click.option("--over-limit", type=click.Choice(["drop", "truncate"]), default="drop", show_default=True,
              help="What --max-prompt-tokens does to a longer prompt: drop the request, or cut the prompt to the cap.")
@click.option("--first-turn-only", is_flag=True, help="ShareGPT: only the first human turn of each conversation (no sessions).")
def import_cmd(format: str, file: str, output: str, block_size: int | None, time_unit: str | None, tokenizer: str | None,
               api: str, model: str | None, limit: int | None, skip_invalid: bool, seed: int,
               default_output_tokens: int | None, max_prompt_tokens: int | None, over_limit: str, first_turn_only: bool) -> None:
    if Path(output).resolve() == Path(file).resolve():
        raise click.BadParameter("must not be the input file", param_hint="-o")
    opts = Options(block_size=block_size, time_unit=time_unit, api=api, model=model, limit=limit, skip_invalid=skip_invalid,
                   seed=seed, default_output_tokens=default_output_tokens, max_prompt_tokens=max_prompt_tokens, over_limit=over_limit,
                   first_turn_only=first_turn_only)
    try:
        tok = Tokenizer(tokenizer) if tokenizer else None
        report = import_trace(format, file, output, opts, tok)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    for line in report.lines():
        click.echo(line)
