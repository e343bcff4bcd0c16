"""yaotu-trace: workload analyzer for LLM-inference request traces."""

__version__ = "0.1.0"
