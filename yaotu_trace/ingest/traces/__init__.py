"""Trace formats read from what a running deployment writes about each request (engine request
logs and exports, gateway and cache logs): one module per format with its `FORMAT` descriptor,
registered in `ingest.registry` like every other format."""
