"""The target's own Prometheus metrics, scraped during a run and kept in the
results file: what the server says about speculative decoding and its load,
to explain what the client measured.

- `scrape`: the scraper (a thread off the measurement path that only fetches
  while a point runs; brackets each point with a scrape of its own);
- `results.server_samples`: how the pages and their samples are kept (a
  crash-safe stream of raw pages during the run, parsed between points,
  folded into the results file at the end);
- `names`: which metric names each server (vLLM, SGLang, llama.cpp, the
  simulator) publishes the figures under;
- `figures`: the per-point figures (acceptance rate and length, by
  position, drafts/s; running, waiting, KV usage, prefix hits, preemptions).
"""
