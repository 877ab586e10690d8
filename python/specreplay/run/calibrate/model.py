"""`server.toml`: the server model `specreplay calibrate` writes and
`specreplay replay --predict` reads (docs/predict.md).

Every parameter is a table with its `value` and how it was obtained:
`status = "fitted"` with its fit quality (`r2`, `residual`, in the
parameter's unit) and the `samples` behind it; `status = "unknown"` with
`needs`, the run that would measure it (never a silent default); or
`status = "what-if"` when an override set it for one prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from specreplay.errors import ConfigError
from specreplay.run.calibrate.outputs import core_classes
from specreplay.settings.tomlfile import read_toml

if TYPE_CHECKING:
    from specreplay import _core

#: The parameters of the model, in `_core.predict_point`'s names, with their
#: unit and what they mean (docs/predict.md has the same list).
PARAMS: dict[str, tuple[str, str]] = {
    "frontend_us": ("µs", "fixed time from arrival to the waiting queue"),
    "frontend_jitter_us": ("µs", "width of the uniform spread of the frontend time around frontend_us"),
    "co_launch": ("share", "of the groups of requests sent together to an idle server, the share it started in one iteration: from one half, the model launches every request sent by an iteration's start with it (llama.cpp's loop), below, the first arrival starts alone (vLLM, the simulator)"),
    "cached_co_launch": ("share", "with co_launch, the chance that a group sent together to an idle server with one prompt found cached whole is started in one iteration (else the cached one alone, the others prefilled in its first decode gap), from the groups the runs showed by Laplace's rule ((together + 1) / (groups + 2): 2 of 2 is not a certainty); a race in llama.cpp's loop, drawn per group whatever the arrival order (unknown: the arrival order decides)"),
    "prefill_us_per_token": ("µs/token", "prefill cost per computed prompt token"),
    "prefill_us_per_cached_token": ("µs/token", "prefill cost per prompt token served from the prefix cache"),
    "template_cached_tokens": ("tokens", "prompt tokens every request finds cached whatever its prompt (llama.cpp's chat-template prefix, left in its slot)"),
    "step_us": ("µs", "decode step with one sequence in the batch"),
    "batch_step_cost": ("fraction", "extra step time per further decoding sequence, as a fraction of step_us"),
    "batch_step_factors": ("fraction", "decode step per batch size 1, 2, …, as a multiple of step_us (interpolated between sizes; beyond the last, batch_step_cost per sequence)"),
    "max_num_seqs": ("requests", "batch limit: the most requests running at once"),
    "max_num_batched_tokens": ("tokens", "token budget of one iteration (chunked prefill): decode tokens first, then prompt chunks"),
    "kv_cache_tokens": ("tokens", "KV-cache budget"),
    "prompt_tokens_per_word": ("ratio", "server prompt tokens per token of the simulator's count (a word, 4 per chat message)"),
    "steps_per_chunk": ("steps", "decode steps per streamed chunk (delivery)"),
    "spec_acceptance": ("probability", "conditional acceptance of each draft position (empty: no speculation)"),
    "spec_step_cost": ("fraction", "extra step cost per draft token, as a fraction of step_us"),
    "speed_spread": ("log-sd", "spread of the server's speed: each iteration's cost × exp(speed_spread × z), z standard normal"),
    "speed_window_us": ("µs", "how long one draw of the server's speed lasts"),
}

#: What a parameter's `residual` measures (the quantity its fit predicts).
RESIDUAL_OF: dict[str, str] = {
    "frontend_us": "µs of TTFT", "frontend_jitter_us": "µs of TTFT", "prefill_us_per_token": "µs of TTFT",
    "prefill_us_per_cached_token": "µs of TTFT", "step_us": "µs per step", "batch_step_cost": "µs per step",
    "batch_step_factors": "µs per step (a seen size's median against the table)",
    "template_cached_tokens": "cached tokens", "max_num_seqs": "requests", "max_num_batched_tokens": "tokens per iteration", "prompt_tokens_per_word": "prompt tokens", "steps_per_chunk": "tokens per chunk", "spec_step_cost": "µs per step",
}

#: Parameters a prediction cannot run without (the others have a stated
#: meaning when unknown: no batch limit, no KV budget, no cache discount).
REQUIRED = ("prefill_us_per_token", "step_us")


@dataclass
class Param:
    name: str
    status: str  # fitted | unknown | what-if
    value: Any = None
    r2: float | None = None
    residual: float | None = None
    samples: int = 0
    how: str = ""
    needs: str = ""

    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "unit": PARAMS[self.name][0]}
        if self.value is not None:
            out["value"] = self.value
        if self.r2 is not None and math.isfinite(self.r2):
            out["r2"] = round(self.r2, 4)
        if self.residual is not None and math.isfinite(self.residual):
            out["residual"] = round(self.residual, 3)
            out["residual_of"] = RESIDUAL_OF.get(self.name, PARAMS[self.name][0])
        out["samples"] = self.samples
        if self.how:
            out["how"] = self.how
        if self.needs:
            out["needs"] = self.needs
        return out

    def describe(self) -> str:
        unit = PARAMS[self.name][0]
        if self.status == "unknown":
            return f"{self.name}: unknown — {self.needs}"
        quality = []
        if self.r2 is not None and math.isfinite(self.r2):
            quality.append(f"R² {self.r2:.3f}")
        if self.residual is not None and math.isfinite(self.residual):
            quality.append(f"residual {self.residual:.3g} {RESIDUAL_OF.get(self.name, unit)}")
        quality.append(f"{self.samples} samples")
        return f"{self.name} = {_show(self.value)} {unit} ({self.status}; {', '.join(quality)})"


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


@dataclass
class ServerModel:
    """A calibrated server: its parameters, output lengths per prompt class,
    and the range its runs covered."""

    params: dict[str, Param]
    output: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    @property
    def prefix_cache_known(self) -> bool:
        """The runs measured what a cached prompt token costs, so the model
        has a prefix cache; without it every prompt is prefilled in full."""
        return self.params["prefill_us_per_cached_token"].status != "unknown"

    @property
    def co_launch(self) -> bool:
        """Requests sent together are launched in one iteration (llama.cpp's
        loop): a share from one half; unknown, the rule the model was first
        built on (llama.cpp's)."""
        p = self.params["co_launch"]
        return p.status == "unknown" or float(p.value) >= 0.5

    def to_toml(self) -> str:
        import tomli_w

        doc: dict[str, Any] = {
            "calibration": self.calibration,
            "params": {name: p.to_toml() for name, p in self.params.items()},
            "output": self.output,
        }
        return tomli_w.dumps(doc)

    def write(self, path: str | Path) -> None:
        Path(path).write_text(self.to_toml())

    @classmethod
    def read(cls, path: str | Path) -> ServerModel:
        doc = read_toml(str(path))
        where = str(path)
        params: dict[str, Param] = {}
        raw = doc.get("params")
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: no [params] table: is this a server.toml from `specreplay calibrate`?")
        for name, table in raw.items():
            if name not in PARAMS:
                raise ConfigError(f"{where}: params.{name}: unknown parameter (known: {', '.join(PARAMS)})")
            if not isinstance(table, dict) or table.get("status") not in ("fitted", "unknown", "what-if"):
                raise ConfigError(f"{where}: params.{name}: expected a table with status = fitted, unknown or what-if")
            if table["status"] != "unknown" and "value" not in table:
                raise ConfigError(f"{where}: params.{name}: status {table['status']} needs a value")
            params[name] = Param(
                name, table["status"], table.get("value"), table.get("r2"), table.get("residual"), int(table.get("samples", 0)),
                str(table.get("how", "")), str(table.get("needs", "")),
            )
        for name in PARAMS:
            params.setdefault(name, Param(name, "unknown", needs="not in the file"))
        output = doc.get("output", {})
        if not isinstance(output, dict):
            raise ConfigError(f"{where}: output: expected a table of prompt classes")
        calibration = doc.get("calibration", {})
        return cls(params, output, calibration if isinstance(calibration, dict) else {}, where)

    def with_overrides(self, overrides: dict[str, Any]) -> ServerModel:
        """A copy with what-if values (`spec_draft_len`, a single
        `spec_acceptance` for every position, or any parameter)."""
        params = {k: Param(**{**p.__dict__}) for k, p in self.params.items()}
        overrides = dict(overrides)
        draft_len = overrides.pop("spec_draft_len", None)
        acceptance = overrides.pop("spec_acceptance", None)
        if draft_len is not None or acceptance is not None:
            current = params["spec_acceptance"].value or []
            k = int(draft_len) if draft_len is not None else len(current)
            if k < 0 or k > 64:
                raise ConfigError(f"what-if spec_draft_len: must be in [0, 64], got {k}")
            if isinstance(acceptance, (int, float)):
                vector = [float(acceptance)] * k
            elif isinstance(acceptance, list):
                vector = [float(a) for a in acceptance][:k] if draft_len is not None else [float(a) for a in acceptance]
            else:
                if k > len(current) and not current:
                    raise ConfigError("what-if spec_draft_len: the model has no measured acceptance: give spec_acceptance too")
                vector = (list(current) + [current[-1]] * k)[:k] if current else []
            params["spec_acceptance"] = Param("spec_acceptance", "what-if", vector, how="set on the command line")
        for name, value in overrides.items():
            if name not in PARAMS:
                raise ConfigError(f"what-if {name}: unknown parameter (known: spec_draft_len, {', '.join(PARAMS)})")
            params[name] = Param(name, "what-if", value, how="set on the command line")
        return ServerModel(params, self.output, self.calibration, self.source)

    def core_mapping(self, seed: int, usage_probe: bool = False) -> _core.ServerModel:
        """The `ServerModel` mapping of `_core.predict_point`: unknown limits
        as none, an unknown cache discount or delivery as their neutral value
        (`assumptions` says which). `usage_probe`: the point follows the
        replay's usage probe (the run's first point), whose request leaves
        the first prompt in the prefix cache."""
        missing = [n for n in REQUIRED if self.params[n].status == "unknown"]
        if missing:
            needs = "; ".join(f"{n}: {self.params[n].needs}" for n in missing)
            raise ConfigError(f"{self.source}: cannot predict without {', '.join(missing)} ({needs})")

        def value(name: str, neutral: Any) -> Any:
            p = self.params[name]
            return neutral if p.status == "unknown" else p.value

        prefill = float(value("prefill_us_per_token", 0.0))
        mapping: dict[str, Any] = {
            "frontend_us": float(value("frontend_us", 0.0)),
            "frontend_jitter_us": float(value("frontend_jitter_us", 0.0)),
            "co_launch": self.co_launch,
            # Unknown: the arrival order decides (alone when it reached the server first).
            "cached_co_launch": None if self.params["cached_co_launch"].status == "unknown" else float(self.params["cached_co_launch"].value),
            "prefill_us_per_token": prefill,
            # Unknown: a cached token costs what a computed one does (no discount assumed).
            "prefill_us_per_cached_token": float(value("prefill_us_per_cached_token", prefill)),
            "step_us": float(value("step_us", 0.0)),
            "batch_step_cost": float(value("batch_step_cost", 0.0)),
            "batch_step_factors": self._step_factors(),
            "max_num_seqs": None if self.params["max_num_seqs"].status == "unknown" else int(self.params["max_num_seqs"].value),
            "max_num_batched_tokens": None if self.params["max_num_batched_tokens"].status == "unknown" else int(self.params["max_num_batched_tokens"].value),
            "kv_cache_tokens": None if self.params["kv_cache_tokens"].status == "unknown" else int(self.params["kv_cache_tokens"].value),
            "prefix_caching": self.prefix_cache_known,
            "template_cached_tokens": int(value("template_cached_tokens", 0)),
            "prompt_tokens_per_word": float(value("prompt_tokens_per_word", 1.0)),
            "steps_per_chunk": float(value("steps_per_chunk", 1.0)),
            "spec_acceptance": [float(a) for a in value("spec_acceptance", [])],
            "spec_step_cost": float(value("spec_step_cost", 0.0)),
            "speed_spread": float(value("speed_spread", 0.0)),
            "speed_window_us": float(value("speed_window_us", 0.0)),
            "usage_probe": usage_probe,
            "output": core_classes(self.output),
            "seed": seed,
        }
        return cast("_core.ServerModel", mapping)

    def _step_factors(self) -> list[float]:
        """The measured step table, unless a what-if set batch_step_cost alone:
        then the line is the step at every batch size, as the what-if says."""
        table, cost = self.params["batch_step_factors"], self.params["batch_step_cost"]
        if table.status == "unknown" or (cost.status == "what-if" and table.status != "what-if"):
            return []
        if not isinstance(table.value, list) or not all(isinstance(f, (int, float)) and not isinstance(f, bool) for f in table.value):
            raise ConfigError(f"{self.source or 'what-if'}: batch_step_factors: expected a list of numbers (the step of 1, 2, … "
                              f"sequences over step_us), got {table.value!r}")
        return [float(f) for f in table.value]

    def assumptions(self, concurrent: bool) -> list[str]:
        """What a prediction assumes for unknown parameters, said loudly.
        `concurrent`: the load may put more than one request in the batch."""
        out = []
        p = self.params
        if p["frontend_us"].status == "unknown":
            out.append(f"frontend_us unknown: taken as 0, its time is in prefill_us_per_token ({p['frontend_us'].needs})")
        if p["frontend_jitter_us"].status == "unknown":
            out.append(f"frontend_jitter_us unknown: requests sent together reach the engine together ({p['frontend_jitter_us'].needs})")
        if concurrent and p["co_launch"].status == "unknown":
            out.append(f"co_launch unknown: requests sent together are launched in one iteration, as llama.cpp does ({p['co_launch'].needs})")
        if concurrent and self.co_launch and p["cached_co_launch"].status == "unknown" and self.prefix_cache_known:
            out.append(f"cached_co_launch unknown: a prompt found cached whole starts an idle server's iteration alone when it reaches it first ({p['cached_co_launch'].needs})")
        if p["prompt_tokens_per_word"].status == "unknown":
            out.append(f"prompt_tokens_per_word unknown: prompts counted one token per word ({p['prompt_tokens_per_word'].needs})")
        if p["prefill_us_per_cached_token"].status == "unknown":
            out.append(f"prefill_us_per_cached_token unknown: no prefix cache modelled ({p['prefill_us_per_cached_token'].needs})")
        if concurrent:
            if p["batch_step_cost"].status == "unknown":
                out.append(f"batch_step_cost unknown: the decode step taken as not growing with the batch ({p['batch_step_cost'].needs})")
            if p["batch_step_factors"].status == "unknown" and p["batch_step_cost"].status != "unknown":
                out.append(f"batch_step_factors unknown: the decode step taken as linear in the batch ({p['batch_step_factors'].needs})")
            if p["max_num_seqs"].status == "unknown":
                out.append(f"max_num_seqs unknown: no batch limit modelled ({p['max_num_seqs'].needs})")
            if p["max_num_batched_tokens"].status == "unknown":
                out.append(f"max_num_batched_tokens unknown: each prompt prefilled whole in one iteration ({p['max_num_batched_tokens'].needs})")
            if p["kv_cache_tokens"].status == "unknown":
                out.append(f"kv_cache_tokens unknown: no KV-cache limit modelled ({p['kv_cache_tokens'].needs})")
        if p["speed_spread"].status == "unknown":
            out.append(f"speed_spread unknown: every iteration costs exactly the fitted costs ({p['speed_spread'].needs})")
        if p["spec_step_cost"].status == "unknown" and p["spec_acceptance"].status == "what-if":
            out.append(f"spec_step_cost unknown: drafts taken as free ({p['spec_step_cost'].needs})")
        for name, param in p.items():
            if param.status == "what-if":
                out.append(f"{name} = {_show(param.value)}: a what-if, not a measurement")
        return out
