"""The metric names the figures read, per server, from each server's own
source and documentation (docs/results.md, "Server metrics", lists them with
their sources). For each figure the candidates are tried in order and the
first one the page has is used; every other sample is kept in the results
all the same, raw.

- vLLM (v1 engine, `vllm/v1/metrics/loggers.py`, `vllm/v1/spec_decode/metrics.py`):
  `vllm:` names; `vllm:gpu_cache_usage_perc` and `vllm:gpu_prefix_cache_*`
  are the names before 0.10. `kv_cache_usage_perc` is a fraction (1 = full)
  despite its name. The simulator (`specreplay serve`) publishes the same.
- SGLang (`python/sglang/srt/metrics/collector.py`): `sglang:` gauges logged
  by the scheduler each decode-log interval, speculative acceptance among
  them (`spec_accept_length`, `spec_accept_rate`: averages the server
  computed, not counters); retractions are its preemptions.
- llama.cpp (llama-server's `/metrics`, on with `--metrics`; as the xllamacpp
  build the tests run publishes them): `llamacpp:`
  counters, the speculative ones named as vLLM's; `prompt_tokens_total`
  counts the prompt tokens it computed (not those reused from its cache,
  `prompt_tokens_cached_total`); `kv_cache_usage_ratio` exists in older
  builds only.
"""

from __future__ import annotations

#: Counters: the figure is the increase over the point.
COUNTERS: dict[str, tuple[str, ...]] = {
    "drafts": ("vllm:spec_decode_num_drafts_total", "llamacpp:spec_decode_num_drafts_total"),
    "draft_tokens": ("vllm:spec_decode_num_draft_tokens_total", "llamacpp:spec_decode_num_draft_tokens_total"),
    "accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total", "llamacpp:spec_decode_num_accepted_tokens_total"),
    # One series per draft position (label `position`): steps whose run of
    # accepted drafts reached that position.
    "accepted_per_position": (
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
    ),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total", "llamacpp:prompt_tokens_cached_total"),
    # llama.cpp counts no queries: its hits plus the prompt tokens it computed are.
    "prefix_misses": ("llamacpp:prompt_tokens_total",),
    "preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total", "llamacpp:tokens_predicted_total"),
}

#: Gauges that add up over label sets (several engines of one server).
SUMMED_GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
}

#: Gauges that are fractions or averages: averaged over label sets.
AVERAGED_GAUGES: dict[str, tuple[str, ...]] = {
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "llamacpp:kv_cache_usage_ratio"),
    # SGLang's own averages, used when the server has no speculative counters.
    "acceptance_length": ("sglang:spec_accept_length",),
    "acceptance_rate": ("sglang:spec_accept_rate",),
    "prefix_hit_rate": ("sglang:cache_hit_rate",),
}


def known_names() -> set[str]:
    """Every sample name a figure reads."""
    return {n for table in (COUNTERS, SUMMED_GAUGES, AVERAGED_GAUGES) for names in table.values() for n in names}
