"""The trace formats the tool reads, and how a file's format is recognised."""

from __future__ import annotations

from enum import StrEnum


class TraceFormat(StrEnum):
    """Input formats; `--input-format` takes these names."""

    CANONICAL_PARQUET = "parquet"
    CANONICAL_JSONL = "jsonl"
    CANONICAL_CSV = "csv"
    MOONCAKE = "mooncake"
    BAILIAN = "bailian"
    AZURE = "azure"
    BURSTGPT = "burstgpt"
    RAGPULSE = "ragpulse"
    WEKA = "weka"
    VLLM_BENCH = "vllm-bench"
    OTEL = "otel"


def sniff_keys(keys: set[str]) -> TraceFormat | None:
    """Recognise a JSON record (one line of JSONL) by its keys."""
    # Qwen/Bailian rows also carry Mooncake's four keys; the chat tree tells them apart.
    if {"chat_id", "parent_chat_id"} <= keys:
        return TraceFormat.BAILIAN
    if "resourceSpans" in keys or "resource_spans" in keys:
        return TraceFormat.OTEL
    # RAGPulse rows also have these four keys; its session_id tells them apart.
    if {"timestamp", "input_length", "output_length", "hash_ids"} <= keys and (
        "session_id" not in keys
    ):
        return TraceFormat.MOONCAKE
    if {"timestamp", "input_length", "output_length"} <= keys and (
        {"session_id", "hash_ids"} & keys or "query_id" in keys or "sys_prompt_id" in keys
    ):
        return TraceFormat.RAGPULSE
    if "arrival_s" in keys:
        return TraceFormat.CANONICAL_JSONL
    return None


def sniff_header(columns: set[str]) -> TraceFormat | None:
    """Recognise a CSV by its header."""
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= columns:
        return TraceFormat.AZURE
    if {"Request tokens", "Response tokens"} <= columns:
        return TraceFormat.BURSTGPT
    if "arrival_s" in columns:
        return TraceFormat.CANONICAL_CSV
    return None
