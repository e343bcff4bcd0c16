"""The values every layer shares: the canonical request table, the step log, reports.

`schema` (the table, its validation and `Trace`), `canonical` (reading and writing it, with the
codecs in `compressed`, `jsonl` and `parquet_file`), `steplog` (the engine's step log),
`token_times` and `order_stats` (streamed summaries), `report` (the frozen `Report` every
command returns), and the section values the renderers read: `workload_profile`,
`success_profile`, `figures`, `workload_figures`, `prefix_reuse`, `run_diff`, and `charts` (the
console's pictures). Nothing here knows a trace format, a command or a terminal.
"""
