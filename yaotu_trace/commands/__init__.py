"""One module per `trace` command: options in, a finished `Report` out (and, for the commands
that write tables, the file written atomically).

These functions are the package's Python API (`yaotu_trace.analyze`, ..., docs/python-api.md);
`cli/` only parses the options into their values, calls one of them and writes the report. What
several commands share lives apart: `load.py` (reading a command's inputs), `settings.py` (the
diagnosis options checked) and `shared/` (the parts several commands build). A command module
imports those, never another command's module (a contract in pyproject.toml), and combines
results only as values (sections), never through their JSON documents.
"""
