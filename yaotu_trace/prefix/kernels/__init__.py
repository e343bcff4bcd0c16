"""The replay's kernels: block chains and the passes over them, compiled or in numpy.

Everything here works on `BlockChains` (dense chain ids) and returns plain values
(`ReplayResult`, `DistanceHistograms`, `CapacityCurve`); none of it knows a report, a command or
a trace's columns beyond its prompt content. The analyses at `prefix/` (the waterfall, the
sweep's section, hot prefixes, the overview, the grid, ...) are built on these. A kernel module
imports only other kernels and the package's shared vocabulary (`prefix.rules`,
`prefix.memory`), never an analysis (`tests/prefix/test_rooms.py`).

| module | what it holds |
|---|---|
| `chains` | `BlockChains`, `PromptContent` and the layout of a chain build, for both flavours |
| `blocks` | the compiled passes of a chain build: hashing and dense ids, in memory and streamed |
| `stream` | `ParquetPrompts`: a Parquet content column read batch by batch, checked (no numba) |
| `numpy_passes` | the chain build and the stack distances in numpy, for a small trace |
| `engine` | the replay: unlimited, one global LRU, the general loop with routing and LFU/FIFO |
| `exact`, `exact_vllm`, `exact_sglang` | engine-exact pools: vLLM's blocks, SGLang's radix tree |
| `optimal` | Belady's optimal eviction |
| `ideal` | the waterfall's token-granular longest common prefix |
| `sweep` | LRU stack distances, compiled: every capacity in one pass |
| `curve` | the capacity curve from the stack-distance histograms, and a pass's checked inputs |
| `result` | `ReplayResult`, what every replay returns |
"""
