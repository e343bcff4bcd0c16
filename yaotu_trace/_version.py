"""The package's version, stated once: the build reads it (pyproject.toml) and reports print it."""

__version__ = "0.1.0"
