"""Request-log collection: canonical JSONL (bulk and followed), Azure traces, vLLM bench results.

One job per module: ``timestamps`` (the epoch/RFC 3339 rule), ``records`` (per-line validation),
``lines`` (bounded line and block reading), ``jsonl`` / ``azure`` / ``vllm_bench`` (parsers),
``store`` (dedup and append), ``quarantine`` (rejects), ``ingest`` (bulk), ``checkpoint`` and
``tail`` (follow mode), ``replay`` (a trace as simulator arrivals), ``progress`` (TTY bar).
"""
