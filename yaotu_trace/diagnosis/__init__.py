"""Diagnosis: findings, the verdict and the remedy ledger, built on the axes.

`yaotu_trace.diagnosis.diagnose.diagnose` runs the four axis analyzers (`yaotu_trace.axes`,
where each rule's words, thresholds and check live) and builds the report; this package's
`__init__` imports nothing, so importing one of its modules stays cheap.
"""
