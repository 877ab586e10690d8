"""Media for `specreplay synth`: images drawn with Pillow (`pip install
'specreplay[media]'`) as real PNG or JPEG files, and audio clips written as
WAV with the standard library's `wave`. Deterministic under the seed.

The images are a smooth colour field with shapes drawn over it: they
compress like illustrations, not like noise, and every image of a seed is
its own (a server's image cache sees different images unless the trace
repeats one, as a session does in every turn).
"""

from __future__ import annotations

import io
import math
import random
import wave

from specreplay.errors import ConfigError

IMAGE_FORMATS = ("png", "jpeg")
AUDIO_RATE = 16_000


def parse_size(text: str) -> tuple[int, int]:
    """`'1024x768'` → (1024, 768)."""
    w, sep, h = text.lower().partition("x")
    try:
        size = (int(w), int(h))
    except ValueError:
        size = (0, 0)
    if not sep or size[0] < 1 or size[1] < 1 or size[0] * size[1] > 64 << 20:
        raise ConfigError(f"--image-size: expected WIDTHxHEIGHT in pixels (e.g. 1024x768), got {text!r}")
    return size


def draw_image(rng: random.Random, size: tuple[int, int], fmt: str) -> bytes:
    """One image of `size` as `fmt` (png or jpeg) bytes."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        raise ConfigError("--images needs Pillow: pip install 'specreplay[media]'") from None
    w, h = size
    small = Image.new("RGB", (8, 8))
    small.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(64)])
    image = small.resize((w, h), Image.Resampling.BILINEAR)
    pen = ImageDraw.Draw(image)
    for _ in range(12):
        x0, y0 = rng.randrange(w), rng.randrange(h)
        x1, y1 = min(w, x0 + rng.randrange(1, w // 2 + 2)), min(h, y0 + rng.randrange(1, h // 2 + 2))
        colour = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
        (pen.ellipse if rng.random() < 0.5 else pen.rectangle)((x0, y0, max(x0, x1), max(y0, y1)), fill=colour)
    out = io.BytesIO()
    image.save(out, format="PNG" if fmt == "png" else "JPEG", quality=85)
    return out.getvalue()


def write_audio(rng: random.Random, seconds: float) -> bytes:
    """A mono 16 kHz 16-bit WAV clip of `seconds`: a few tones."""
    import numpy as np

    t = np.arange(int(round(seconds * AUDIO_RATE))) / AUDIO_RATE
    tones = [rng.uniform(150.0, 1200.0) for _ in range(3)]
    wave_ = sum(np.sin(2 * math.pi * f * t) for f in tones) / len(tones)
    frames = (np.asarray(wave_) * 12000).astype("<i2").tobytes()
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(AUDIO_RATE)
        w.writeframes(frames)
    return out.getvalue()
