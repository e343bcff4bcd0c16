"""Diagnosis: findings, the verdict and the remedy ledger, built on the axes.

`yaotu_trace.diagnosis.diagnose.judge_trace` runs the four axis analyzers
(`yaotu_trace.axes`, where each rule's words, thresholds and check live), the ledger, the
findings and the verdict; the `diagnose` command turns that into its report. This package's
`__init__` imports nothing, so importing one of its modules stays cheap.
"""
