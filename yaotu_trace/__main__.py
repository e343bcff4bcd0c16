"""`python -m yaotu_trace` runs the `trace` command."""

from yaotu_trace.cli import run

run()
