"""What hardware and models are: the model catalog, the GPU catalog, capacity units.

Pure lookups over `resources/*.json` and the unit grammar; no trace, no pandas.
"""
