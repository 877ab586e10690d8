"""`specreplay synth`: a synthetic trace."""

from __future__ import annotations

import click

from specreplay.errors import ConfigError
from specreplay.literals import ARRIVALS
from specreplay.trace.synth import SynthConfig, write_synth
from specreplay.trace.text import Tokenizer


@click.command("synth")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Trace file to write.")
@click.option("--num-requests", type=int, default=100, show_default=True, help="Requests in the trace.")
@click.option("--rate", type=float, default=1.0, show_default=True, help="Sessions started per second (= requests/s with one turn).")
@click.option("--arrival", type=click.Choice(ARRIVALS), default="poisson", show_default=True, help="Arrival process of session starts.")
@click.option("--burstiness", type=float, default=1.0, show_default=True, help="Gamma shape for --arrival gamma (1 = Poisson, <1 burstier).")
@click.option("--input-len", default="512", show_default=True, help="Tokens of each new user message: N, uniform:A:B, normal:MEAN:STD, lognormal:MEDIAN:SIGMA, exp:MEAN.")
@click.option("--output-len", default="128", show_default=True, help="Output tokens (max_tokens = min_tokens, ignore_eos), same forms.")
@click.option("--prefix-groups", type=int, default=0, show_default=True, help="Sessions fall into this many groups sharing a system prompt.")
@click.option("--prefix-len", type=int, default=0, show_default=True, help="Tokens of each group's shared system prompt.")
@click.option("--turns", default="1", show_default=True, help="Turns per session (distribution, as --input-len); later turns carry the conversation so far.")
@click.option("--think-time", default="exp:5", show_default=True, help="Seconds between an answer and the session's next turn: fixed (0.2) or a distribution, as --input-len (exp:5 = exponential, mean 5 s).")
@click.option("--api", type=click.Choice(["chat", "completions"]), default="chat", show_default=True)
@click.option("--model", help="Model name to put in every body.")
@click.option("--tokenizer", type=click.Path(dir_okay=False, exists=True), help="HF tokenizer.json: exact lengths (pip install 'specreplay[tokenizer]').")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--images", type=int, default=0, show_default=True, help="Images in each new user message (chat; drawn with Pillow: pip install 'specreplay[media]').")
@click.option("--image-size", default="512x512", show_default=True, help="Their size, WIDTHxHEIGHT.")
@click.option("--image-format", type=click.Choice(["png", "jpeg"]), default="png", show_default=True)
@click.option("--image-pool", type=int, default=0, show_default=True, help="Draw the images from this many distinct ones (0: every image its own).")
@click.option("--audio-seconds", type=float, default=0.0, show_default=True, help="An audio clip (WAV, 16 kHz) of this length in each new user message.")
@click.option("--inline-media", is_flag=True, help="Put media in the bodies as data URIs instead of once each in TRACE.media/.")
def synth(output: str, tokenizer: str | None, inline_media: bool, **opts: object) -> None:
    """Write a synthetic trace: arrival process, length distributions, shared-prefix groups, multi-turn sessions."""
    try:
        config = SynthConfig(**opts)  # type: ignore[arg-type]
        records = write_synth(config, output, Tokenizer(tokenizer) if tokenizer else None, inline_media=inline_media)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    sessions = len({r.session_id for r in records if r.session_id})
    span = records[-1].arrival or 0.0
    click.echo(f"wrote {len(records)} requests" + (f" in {sessions} sessions" if sessions else "") + f" over {span:.1f} s into {output}")
