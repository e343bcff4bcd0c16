"""`trace models`: the model catalog with KV bytes per token at each KV dtype (what --model
accepts)."""

from __future__ import annotations

from yaotu_trace.cli.app import command, report_format, write_atomically
from yaotu_trace.cli.options import FormatOpt, OutputOpt
from yaotu_trace.cli.progress import QuietOpt
from yaotu_trace.files import STDOUT


@command()
def models(format: FormatOpt = None, output: OutputOpt = None, quiet: QuietOpt = False) -> None:
    """List the model catalog with KV bytes per token per KV dtype (the names --model accepts).

    Examples:

      trace models

      trace models --format json
    """
    from yaotu_trace.commands import models as models_command

    del quiet  # the catalog is printed at once: no progress to hide
    chosen = report_format(format, output)
    write_atomically(output or STDOUT, models_command.catalog_text(models_command.models(), chosen))
