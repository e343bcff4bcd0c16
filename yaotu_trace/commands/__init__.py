"""One module per `trace` command: options in, a finished `Report` out (and, for the commands
that write tables, the file written atomically).

These functions are the package's Python API (`yaotu_trace.analyze`, ..., docs/python-api.md);
`cli/` only parses the options, calls one of them and writes the report. A command may combine
others' results only as values (sections), never through their JSON documents.
"""
