"""The trace formats: one module per format, each with its `FORMAT` descriptor
(`ingest.formats.TraceFormatSpec`), registered in `ingest.registry` in detection order.

A module reads its format into a `RawTrace` with canonical column names; `normalize` validates
it. Shared by several formats: `csv_source` (a CSV with fixed columns), `json_document` (one
JSON document, compressed or not) and `common` (the captures a running deployment writes about
each request: engine request logs and exports, gateway and cache logs).
"""
