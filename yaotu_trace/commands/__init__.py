"""One module per `trace` command: options in, a finished `Report` out."""
