"""`specreplay import`: public traces into the specreplay trace format."""

from __future__ import annotations

from pathlib import Path

import click

from specreplay.errors import ConfigError
from specreplay.importers import FORMATS, Options, import_trace
from specreplay.text import Tokenizer

_FORMAT_HELP = "\n".join(f"\b\n  {name:9} {desc}" for name, (desc, _) in FORMATS.items())


@click.command("import", help=f"""Convert a public trace FILE of FORMAT into a specreplay trace.

Where the trace gives only token counts, prompts of that length are
synthesized (equal hash_ids blocks get equal text, so prefix caching behaves
as in the original) and the output length becomes max_tokens + min_tokens +
ignore_eos. Without --tokenizer, lengths follow a documented approximation
and records are marked "approximate". Formats:

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
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthesized text.")
def import_cmd(format: str, file: str, output: str, block_size: int | None, time_unit: str | None, tokenizer: str | None,
               api: str, model: str | None, limit: int | None, skip_invalid: bool, seed: int) -> None:
    if Path(output).resolve() == Path(file).resolve():
        raise click.BadParameter("must not be the input file", param_hint="-o")
    opts = Options(block_size=block_size, time_unit=time_unit, api=api, model=model, limit=limit, skip_invalid=skip_invalid, seed=seed)
    try:
        tok = Tokenizer(tokenizer) if tokenizer else None
        report = import_trace(format, file, output, opts, tok)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    for line in report.lines():
        click.echo(line)
