"""What several commands build the same way: a command imports these modules (and
`commands/load.py`, `commands/settings.py`), never another command's module.

One module per part, so that a command imports only the parts it builds: `analysis` (the
workload profile and its sections), `charts` (the console's pictures), `diagnosis` (the
diagnosis report of a read trace), `change` (the diff of two read runs), `observed` (a
capture's own cached tokens against the replay, for analyze, diagnose and check), `kv_bytes`
(the KV bytes per token of `--model` and `--kv-bytes-per-token`, for sweep and analyze) and
`outputs` (the per-request tables and the metrics export a command writes besides its report).
`trace analyze` of a trace without prompt content then loads no compiled replay, as
`tests/cli/test_startup.py` holds.
"""
