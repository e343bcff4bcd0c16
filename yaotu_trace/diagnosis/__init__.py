"""Diagnosis: thresholds, the rule catalog, findings, the verdict and the remedy ledger.

`yaotu_trace.diagnosis.diagnose.diagnose` runs the four axis analyzers and builds the report;
this package's `__init__` imports nothing so the axis analyzers can use the catalog freely.
"""
