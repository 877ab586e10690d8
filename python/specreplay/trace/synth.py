"""`specreplay synth`: a synthetic trace from a few distributions.

Sessions start by an arrival process at `rate` per second; each session has
a number of turns; turn k+1 carries the whole conversation so far (the
previous prompts and, in place of the answers, filler of the expected
output length), so a server with prefix caching sees the growth of a real
chat. Each later turn records its think time (`think_time`, drawn from
the `think_time` distribution): replay waits that long after the turn
before has ended. Its `arrival` is the turn before's plus the think time,
as if answers took no time (what `replay --sessions independent` sends).
A session may belong to one of `prefix_groups` groups whose members all
start with the same `prefix_len`-token system prompt. Lengths, turns and
think times are drawn from the distributions of `specreplay.settings.distributions`
(at least 1 token, at least 0 s). Everything is deterministic under the
seed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specreplay.settings.distributions import Dist
from specreplay.errors import ConfigError
from specreplay.literals import ARRIVALS
from specreplay.trace.text import PromptMaker, Tokenizer
from specreplay.trace.synth_media import IMAGE_FORMATS, draw_image, parse_size, write_audio
from specreplay.trace import media
from specreplay.trace.media import media_dir
from specreplay.trace.records import TraceRecord, write_trace



@dataclass
class SynthConfig:
    num_requests: int = 100
    rate: float = 1.0
    arrival: str = "poisson"
    burstiness: float = 1.0
    input_len: str = "512"
    output_len: str = "128"
    prefix_groups: int = 0
    prefix_len: int = 0
    turns: str = "1"
    #: Seconds between an answer and the session's next turn: a distribution.
    think_time: str = "exp:5"
    api: str = "chat"
    model: str | None = None
    seed: int = 0
    #: Images in each new user message (chat), drawn by `synth_media`.
    images: int = 0
    image_size: str = "512x512"
    image_format: str = "png"
    #: Distinct images to draw them from (0: every image its own).
    image_pool: int = 0
    #: An audio clip of this many seconds in each new user message (0: none).
    audio_seconds: float = 0.0

    def validate(self) -> None:
        if self.num_requests < 1:
            raise ConfigError(f"--num-requests: must be at least 1, got {self.num_requests}")
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ConfigError(f"--rate: must be positive, got {self.rate}")
        if self.arrival not in ARRIVALS:
            raise ConfigError(f"--arrival: expected one of {', '.join(ARRIVALS)}, got {self.arrival!r}")
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise ConfigError(f"--burstiness: must be positive, got {self.burstiness}")
        if self.prefix_groups < 0 or self.prefix_len < 0:
            raise ConfigError("--prefix-groups and --prefix-len must not be negative")
        if (self.prefix_groups > 0) != (self.prefix_len > 0):
            raise ConfigError("--prefix-groups and --prefix-len go together (both positive)")
        if self.api not in ("chat", "completions"):
            raise ConfigError(f"--api: expected chat or completions, got {self.api!r}")
        if self.images < 0 or self.image_pool < 0:
            raise ConfigError("--images and --image-pool must not be negative")
        if not (self.audio_seconds >= 0 and math.isfinite(self.audio_seconds)):
            raise ConfigError(f"--audio-seconds: must be a non-negative number, got {self.audio_seconds}")
        if (self.images or self.audio_seconds) and self.api != "chat":
            raise ConfigError("--images and --audio-seconds need --api chat (media are chat content parts)")
        if self.image_format not in IMAGE_FORMATS:
            raise ConfigError(f"--image-format: expected one of {', '.join(IMAGE_FORMATS)}, got {self.image_format!r}")
        parse_size(self.image_size)


def _gap(rng: random.Random, c: SynthConfig) -> float:
    if c.arrival == "constant":
        return 1.0 / c.rate
    if c.arrival == "gamma":
        return rng.gammavariate(c.burstiness, 1.0 / (c.rate * c.burstiness))
    return rng.expovariate(c.rate)


class _Media:
    """Draws the media of the new user messages and says where they go:
    into `directory` once each (a reference in the body), or inline."""

    def __init__(self, config: SynthConfig, directory: Path | None) -> None:
        self.config = config
        self.directory = directory
        self.rng = random.Random(f"media:{config.seed}")
        self.size = parse_size(config.image_size)
        self.pool: list[str] = []

    def _place(self, data: bytes, ext: str, mime: str) -> str:
        if self.directory is not None:
            return media.store(self.directory, data, ext)
        import base64

        return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")

    def _image(self) -> str:
        c = self.config
        if c.image_pool and len(self.pool) >= c.image_pool:
            return self.pool[self.rng.randrange(len(self.pool))]
        ext = "png" if c.image_format == "png" else "jpeg"
        url = self._place(draw_image(self.rng, self.size, c.image_format), ext, f"image/{ext}")
        if c.image_pool:
            self.pool.append(url)
        return url

    def parts(self, text: str) -> str | list[dict[str, Any]]:
        c = self.config
        if not c.images and not c.audio_seconds:
            return text
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
        for _ in range(c.images):
            parts.append({"type": "image_url", "image_url": {"url": self._image()}})
        if c.audio_seconds:
            data = self._place(write_audio(self.rng, c.audio_seconds), "wav", "audio/wav")
            # input_audio carries bare base64, not a data URI.
            parts.append({"type": "input_audio", "input_audio": {"data": data.split(",", 1)[-1] if data.startswith("data:") else data, "format": "wav"}})
        return parts


def synthesize(config: SynthConfig, tokenizer: Tokenizer | None = None, media_dir: Path | None = None) -> list[TraceRecord]:
    """The trace's records; media go to `media_dir` once each (referred to
    from the bodies), inline as data URIs without it."""
    config.validate()
    media = _Media(config, media_dir)
    inp = Dist.parse(config.input_len, "--input-len")
    out = Dist.parse(config.output_len, "--output-len")
    turns = Dist.parse(config.turns, "--turns")
    think = Dist.parse(config.think_time, "--think-time", allow_zero=True)
    rng = random.Random(config.seed)
    maker = PromptMaker(tokenizer, seed=config.seed)
    prefixes: dict[int, str] = {}  # each group's shared system prompt
    pending: list[tuple[float, int, int, dict[str, Any], int, float | None]] = []  # arrival, session, turn, body, output, think
    start = 0.0
    session = 0
    while len(pending) < config.num_requests:
        start = start + _gap(rng, config) if session else 0.0
        n_turns = turns.draw(rng)
        group = rng.randrange(config.prefix_groups) if config.prefix_groups else None
        history: list[dict[str, Any]] = []
        if group is not None:
            if group not in prefixes:
                prefixes[group] = maker.fresh(config.prefix_len)
            history.append({"role": "system", "content": prefixes[group]})
        t = start
        for turn in range(n_turns):
            if len(pending) >= config.num_requests:
                break
            pause = round(think.seconds(rng), 6) if turn else None
            t += pause or 0.0
            n_in, n_out = inp.draw(rng), out.draw(rng)
            history.append({"role": "user", "content": media.parts(maker.fresh(n_in))})
            body: dict[str, Any] = {"model": config.model} if config.model else {}
            if config.api == "chat":
                body["messages"] = [dict(m) for m in history]
            else:
                body["prompt"] = "\n\n".join(m["content"] for m in history)
            body.update(max_tokens=n_out, min_tokens=n_out, ignore_eos=True)
            pending.append((t, session, turn, body, n_out, pause))
            history.append({"role": "assistant", "content": maker.fresh(n_out)})
        session += 1
    pending.sort(key=lambda p: (p[0], p[1], p[2]))
    multi = any(p[2] > 0 for p in pending)
    return [
        TraceRecord(
            id=str(i),
            api=config.api,
            body=body,
            arrival=round(t, 6),
            session_id=f"s{s}" if multi else None,
            think_time=pause,
            expected_output_tokens=n_out,
            approximate=tokenizer is None,
        )
        for i, (t, s, _turn, body, n_out, pause) in enumerate(pending)
    ]


def write_synth(config: SynthConfig, output: str | Path, tokenizer: Tokenizer | None = None, inline_media: bool = False) -> list[TraceRecord]:
    """Writes the trace to `output`, its media once each to `output.media/`
    (or inline in the bodies with `inline_media`)."""
    records = synthesize(config, tokenizer, None if inline_media else media_dir(output))
    write_trace(records, output)
    return records
