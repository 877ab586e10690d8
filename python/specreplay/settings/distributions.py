"""The distributions a user writes on the command line or in a config:
`N` (fixed), `uniform:A:B`, `normal:MEAN:STD`, `lognormal:MEDIAN:SIGMA`,
`exp:MEAN`. One syntax for `synth`'s lengths, turns and think times and for
`replay --think-time`, parsed and drawn in one place."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from specreplay.errors import ConfigError

FORMS = "N, uniform:A:B, normal:MEAN:STD, lognormal:MEDIAN:SIGMA, exp:MEAN"
_ARITY = {"const": 1, "uniform": 2, "normal": 2, "lognormal": 2, "exp": 1}


@dataclass(frozen=True)
class Dist:
    kind: str  # const | uniform | normal | lognormal | exp
    a: float
    b: float = 0.0

    @staticmethod
    def parse(text: str, what: str, *, allow_zero: bool = False) -> Dist:
        """`text` as a distribution, or a `ConfigError` naming `what`.
        `allow_zero`: a fixed 0 is allowed (a think time may be none; a
        length may not)."""
        parts = str(text).strip().split(":")
        try:
            nums = [float(p) for p in parts[1:]] if len(parts) > 1 else [float(parts[0])]
        except ValueError:
            raise ConfigError(f"{what}: not a distribution: {text!r} ({FORMS})") from None
        kind = parts[0].lower() if len(parts) > 1 else "const"
        if kind not in _ARITY or len(nums) != _ARITY[kind]:
            raise ConfigError(f"{what}: not a distribution: {text!r} ({FORMS})")
        zero_ok = allow_zero and kind == "const"
        if not all(math.isfinite(n) and n >= 0 for n in nums) or (
            kind in ("const", "exp", "lognormal") and nums[0] <= 0 and not zero_ok
        ):
            must = "must not be negative" if zero_ok else "must be positive numbers"
            raise ConfigError(f"{what}: parameters {must}, got {text!r}")
        if kind == "uniform" and nums[1] < nums[0]:
            raise ConfigError(f"{what}: uniform:A:B needs A ≤ B, got {text!r}")
        return Dist(kind, nums[0], nums[1] if len(nums) > 1 else 0.0)

    def sample(self, rng: random.Random) -> float:
        """One draw as a real number (a normal draw may be negative)."""
        if self.kind == "const":
            return self.a
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        if self.kind == "normal":
            return rng.gauss(self.a, self.b)
        if self.kind == "lognormal":
            return rng.lognormvariate(math.log(self.a), self.b)
        return rng.expovariate(1.0 / self.a)

    def draw(self, rng: random.Random) -> int:
        """One draw as a count (tokens, turns): rounded, at least 1."""
        return max(1, int(round(self.sample(rng))))

    def seconds(self, rng: random.Random) -> float:
        """One draw as a duration in seconds: at least 0."""
        return max(0.0, self.sample(rng))

    def __str__(self) -> str:
        if self.kind == "const":
            return f"{self.a:g}"
        params = [self.a, self.b] if _ARITY[self.kind] == 2 else [self.a]
        return ":".join([self.kind] + [f"{p:g}" for p in params])
