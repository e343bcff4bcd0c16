"""What an engine or a benchmark says about a run, beside the request trace: its Prometheus
series (`metrics`: a range-query export, `/metrics` text in `prom_text`, a server log in
`serverlog`), its step log, and a benchmark result's run-level numbers (`bench_summary`).
"""
