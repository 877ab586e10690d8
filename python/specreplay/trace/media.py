"""Media in request bodies: images, audio and video parts, how big they are,
and where a trace keeps them.

A trace stores each distinct media object once, as a content-addressed file
beside it: `TRACE.media/<sha256>.<ext>` (docs/trace-format.md, "Media"). A
body refers to one by the string `specreplay-media:<sha256>.<ext>` where the
data would be (an `image_url.url`, a `video_url.url`, an `input_audio.data`,
an Anthropic or Responses image's data); replay puts the data back when it
builds the body (`MediaStore.resolve`), each file read and encoded once per
run. So a session that shows the same image in every turn, or 1,000 requests
sharing one image, carry it once (bench/media_trace_size.py measures it).

`stats` counts a body's media parts for the results' `media_*` columns:
count, decoded bytes, pixels (PNG and JPEG headers, read without decoding)
and seconds (WAV headers). A part given by an http(s) URL counts with 0
bytes: its bytes are fetched by the server, not sent.
"""

from __future__ import annotations

import base64
import builtins
import binascii
import hashlib
import io
import struct
import wave
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from specreplay.errors import TraceError

#: How a body refers to a stored media object.
REF_PREFIX = "specreplay-media:"

MIME: dict[str, str] = {"png": "image/png", "jpeg": "image/jpeg", "jpg": "image/jpeg", "wav": "audio/wav", "mp3": "audio/mpeg", "mp4": "video/mp4", "webp": "image/webp"}


@dataclass
class MediaStats:
    """The media parts of one body."""

    count: int = 0
    bytes: int = 0
    pixels: int = 0
    seconds: float = 0.0

    def add(self, data: builtins.bytes | None) -> None:
        self.count += 1
        if data is None:
            return
        self.bytes += len(data)
        size = image_size(data)
        if size is not None:
            self.pixels += size[0] * size[1]
        else:
            self.seconds += audio_seconds(data)


def _stats_of(data: bytes) -> MediaStats:
    one = MediaStats()
    one.add(data)
    return one


def media_dir(trace_path: str | Path) -> Path:
    """Where the media of the trace at `trace_path` are stored."""
    p = Path(trace_path)
    return p.with_name(p.name + ".media")


def store(directory: Path, data: bytes, ext: str) -> str:
    """Writes `data` to `directory` under its sha256 (once) and returns the reference to put in a body."""
    digest = hashlib.sha256(data).hexdigest()
    name = f"{digest}.{ext}"
    target = directory / name
    if not target.exists():
        directory.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
    return REF_PREFIX + name


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG or JPEG header; None for anything else."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return int(w), int(h)
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                i += 2
                continue
            (length,) = struct.unpack(">H", data[i + 2 : i + 4])
            # Start-of-frame markers (not DHT 0xC4, JPG 0xC8, DAC 0xCC).
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack(">HH", data[i + 5 : i + 9])
                return int(w), int(h)
            i += 2 + length
    return None


def audio_seconds(data: bytes) -> float:
    """A WAV clip's length; 0 for anything else."""
    if data[:4] != b"RIFF":
        return 0.0
    try:
        with wave.open(io.BytesIO(data)) as w:
            rate = w.getframerate()
            return w.getnframes() / rate if rate else 0.0
    except (wave.Error, EOFError):
        return 0.0


def _decode_data_uri(url: str) -> bytes | None:
    if not url.startswith("data:"):
        return None
    _, sep, payload = url.partition(";base64,")
    if not sep:
        return None
    return _b64(payload)


def _b64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=False)
    except (binascii.Error, ValueError):
        return None


#: Most base64 text `MediaStore` keeps: the objects used last, so a session's
#: image or one shared by every request is encoded once, and a trace of
#: distinct images does not hold them all.
CACHE_CHARS = 64 << 20


class MediaStore:
    """The media files of one trace, read and base64-encoded once each
    while they are among the last used (`CACHE_CHARS`)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._b64: OrderedDict[str, str] = OrderedDict()
        self._chars = 0
        self._stats: dict[str, MediaStats] = {}
        self._put: Callable[[str, str], str] = lambda ref, prefix: prefix + self._encoded(ref)

    def _file(self, ref: str) -> Path:
        name = ref[len(REF_PREFIX) :]
        if self.directory is None or "/" in name or not (self.directory / name).is_file():
            where = str(self.directory / name) if self.directory is not None else name
            raise TraceError(where, None, None, f"media {ref!r} not found (stored media live beside the trace, in TRACE.media/)")
        return self.directory / name

    def _encoded(self, ref: str) -> str:
        name = ref[len(REF_PREFIX) :]
        cached = self._b64.get(name)
        if cached is not None:
            self._b64.move_to_end(name)
            return cached
        data = self._file(ref).read_bytes()
        self._stats.setdefault(name, _stats_of(data))
        cached = base64.b64encode(data).decode("ascii")
        self._b64[name] = cached
        self._chars += len(cached)
        while self._chars > CACHE_CHARS and len(self._b64) > 1:
            _, dropped = self._b64.popitem(last=False)
            self._chars -= len(dropped)
        return cached

    def _ref_stats(self, ref: str) -> MediaStats:
        """A stored object's stats: its file read once (the engine reads it
        again to send it; only the stats, a few numbers, are kept here)."""
        name = ref[len(REF_PREFIX) :]
        stats = self._stats.get(name)
        if stats is None:
            stats = self._stats[name] = _stats_of(self._file(ref).read_bytes())
        return stats

    def resolve(self, body: dict[str, Any]) -> tuple[dict[str, Any], MediaStats]:
        """`body` with stored media put back (a copy where anything changed;
        nested values are otherwise shared), and its media's stats."""
        return self._walk(body, lambda ref, prefix: prefix + self._encoded(ref))

    def mark(self, body: dict[str, Any]) -> tuple[dict[str, Any], MediaStats, list[tuple[str, str, str]]]:
        """`body` with a mark where each stored object's data goes (the
        engine writes it: `media_at`), its media's stats, and per mark
        (mark, file, prefix)."""
        slots: list[tuple[str, str, str]] = []

        def put(ref: str, prefix: str) -> str:
            self._ref_stats(ref)  # the file exists: fail here, naming it, not in the engine
            assert self.directory is not None
            mark = f"\x00specreplay:media:{len(slots)}\x00"
            slots.append((mark, str(self.directory / ref[len(REF_PREFIX) :]), prefix))
            return mark

        body, stats = self._walk(body, put)
        return body, stats, slots

    def _walk(self, body: dict[str, Any], put: Callable[[str, str], str]) -> tuple[dict[str, Any], MediaStats]:
        self._put = put
        stats = MediaStats()
        key = "messages" if "messages" in body else "input" if isinstance(body.get("input"), list) else None
        if key is None:
            return body, stats
        messages = body[key]
        changed = False
        out_messages = []
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list):
                out_messages.append(message)
                continue
            parts = []
            part_changed = False
            for part in content:
                new = self._part(part, stats) if isinstance(part, dict) else part
                part_changed |= new is not part
                parts.append(new)
            if part_changed:
                changed = True
                out_messages.append({**message, "content": parts})
            else:
                out_messages.append(message)
        if changed:
            body = {**body, key: out_messages}
        return body, stats

    def _part(self, part: dict[str, Any], stats: MediaStats) -> dict[str, Any]:
        kind = part.get("type")
        if kind in ("image_url", "video_url"):
            inner = part.get(kind)
            url = inner.get("url") if isinstance(inner, dict) else inner
            if not isinstance(url, str):
                return part
            if url.startswith(REF_PREFIX):
                one = self._ref_stats(url)
                self._merge(stats, one)
                uri = self._put(url, f"data:{_mime(url)};base64,")
                return {**part, kind: {**inner, "url": uri} if isinstance(inner, dict) else uri}
            stats.add(_decode_data_uri(url))
            return part
        if kind == "input_audio":
            inner = part.get("input_audio")
            data = inner.get("data") if isinstance(inner, dict) else None
            if not isinstance(data, str) or not isinstance(inner, dict):
                return part
            if data.startswith(REF_PREFIX):
                self._merge(stats, self._ref_stats(data))
                return {**part, "input_audio": {**inner, "data": self._put(data, "")}}
            stats.add(_b64(data))
            return part
        if kind in ("image", "input_image"):
            # Anthropic {"type":"image","source":{"type":"base64","data":…}}; Responses {"type":"input_image","image_url":…}.
            source = part.get("source")
            if isinstance(source, dict) and isinstance(source.get("data"), str):
                data = source["data"]
                if data.startswith(REF_PREFIX):
                    self._merge(stats, self._ref_stats(data))
                    return {**part, "source": {**source, "data": self._put(data, "")}}
                stats.add(_b64(data))
                return part
            url = part.get("image_url")
            if isinstance(url, str):
                if url.startswith(REF_PREFIX):
                    self._merge(stats, self._ref_stats(url))
                    return {**part, "image_url": self._put(url, f"data:{_mime(url)};base64,")}
                stats.add(_decode_data_uri(url))
                return part
            stats.add(None)
        return part

    @staticmethod
    def _merge(stats: MediaStats, one: MediaStats) -> None:
        stats.count += one.count
        stats.bytes += one.bytes
        stats.pixels += one.pixels
        stats.seconds += one.seconds


def dedup_body(body: dict[str, Any], directory: Path) -> dict[str, Any]:
    """`body` with every inline media object (data URI image/video, base64
    audio) moved to `directory` and referred to (capture, import, synth)."""
    key = "messages" if "messages" in body else "input" if isinstance(body.get("input"), list) else None
    if key is None:
        return body
    out = []
    for message in body[key]:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            out.append(message)
            continue
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("image_url", "video_url"):
                kind = part["type"]
                inner = part.get(kind)
                url = inner.get("url") if isinstance(inner, dict) else inner
                if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
                    mime = url[5:].split(";", 1)[0]
                    data = _decode_data_uri(url)
                    if data is not None:
                        ref = store(directory, data, _ext(mime))
                        part = {**part, kind: {**inner, "url": ref} if isinstance(inner, dict) else ref}
            elif isinstance(part, dict) and part.get("type") == "input_audio" and isinstance(part.get("input_audio"), dict):
                inner = part["input_audio"]
                data_text = inner.get("data")
                if isinstance(data_text, str) and not data_text.startswith(REF_PREFIX):
                    data = _b64(data_text)
                    if data is not None:
                        part = {**part, "input_audio": {**inner, "data": store(directory, data, str(inner.get("format") or "wav"))}}
            parts.append(part)
        out.append({**message, "content": parts})
    return {**body, key: out}


def _mime(ref: str) -> str:
    return MIME.get(ref.rsplit(".", 1)[-1], "application/octet-stream")


def _ext(mime: str) -> str:
    for ext, m in MIME.items():
        if m == mime:
            return ext
    return mime.rsplit("/", 1)[-1] or "bin"
