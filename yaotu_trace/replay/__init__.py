"""Prefix replay: exact prefix-cache hits of a trace under explicit rules (replay-spec.md)."""
