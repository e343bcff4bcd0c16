"""The replay's kernels: block chains and the passes over them, compiled or in numpy.

Everything here works on `BlockChains` (dense chain ids) and returns plain values
(`ReplayResult`, `DistanceHistograms`, `CapacityCurve`); none of it knows a trace's columns, a
report or a command. The analyses at `prefix/` (the waterfall, the sweep's section, hot
prefixes, the overview, the grid, ...) are built on these. A kernel module imports only other
kernels and the package's shared vocabulary (`prefix.rules`, `prefix.memory`,
`prefix.stream`), never an analysis (`tests/prefix/test_rooms.py`).

| module | what it holds |
|---|---|
| `chains` | `BlockChains` and the layout of a chain build, shared by both flavours of its passes |
| `blocks` | the compiled passes of a chain build: hashing and dense ids, in memory and streamed |
| `engine` | the replay: unlimited, one global LRU, the general loop with routing and LFU/FIFO |
| `exact`, `exact_vllm`, `exact_sglang` | engine-exact pools: vLLM's blocks, SGLang's radix tree |
| `optimal` | Belady's optimal eviction |
| `ideal` | the waterfall's token-granular longest common prefix |
| `sweep` | LRU stack distances, compiled: every capacity in one pass |
| `curve` | the capacity curve from the stack-distance histograms |
| `result` | `ReplayResult`, what every replay returns |
"""
