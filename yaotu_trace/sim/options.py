"""The modelled engine of `trace simulate` and `trace report --simulate`: a scenario file's
options with the ones given laid over them, in one frozen value."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from yaotu_trace.sim.scenario import Scenario, load_scenario


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    """The engine to model: `scenario` (the options given; None fields keep the default) over
    the options of `file` (a scenario TOML, `--scenario`), as command-line options override
    the file."""

    scenario: Scenario = field(default_factory=Scenario)
    file: Path | None = None

    def resolved(self) -> Scenario:
        """The scenario the options give: the file's, with every option given taken over it."""
        if self.file is None:
            return self.scenario
        return load_scenario(Path(self.file)).merged(self.scenario)
