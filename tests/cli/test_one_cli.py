"""One CLI: the options several commands take are the same option everywhere.

The README promises `-o` and `--quiet` on every command and `--format` on every command that
writes a report; an option that two commands share has one name, help, type and default.
"""

from __future__ import annotations

import typer.main

from yaotu_trace.cli import _register_commands
from yaotu_trace.cli.app import OUTPUT_OPTIONS, app

# Options whose meaning is the command's own: an engine's settings in `simulate` versus the
# caps observed by `diagnose`, each command's data output, and `generate`'s model column.
OWN = {
    ("--block-size", "simulate"), ("--route", "simulate"), ("--max-batched-tokens", "simulate"),
    ("--model", "generate"), ("--seed", "generate"), ("--scenario", "compare"),
    ("--format", "report"), ("--out", "replay"), ("--out", "simulate"), ("--out", "convert"),
    ("--out", "generate"), ("--steps-out", "simulate"), ("--steps-out", "generate"),
}
# `--block-size` of the diagnosis (KV blocks) and of the prefix-cache rules (cache blocks);
# the engine's `--instances` (`simulate`, `report --simulate`) and the observed ones of the
# other commands; the engine's `--max-num-seqs` (`simulate`) and the diagnosis' (which
# `report --simulate` also gives the modelled engine).
OBSERVED = {"analyze", "diagnose", "check", "compare", "diff", "replay", "sweep"}
FAMILIES = {"--block-size": ({"diagnose", "check", "report", "diff"}, {"replay", "sweep"}),
            "--instances": ({"simulate", "report"}, OBSERVED),
            "--max-num-seqs": ({"simulate"}, OBSERVED | {"report"})}
DATA_WRITERS = {"convert", "generate"}


def _commands() -> dict[str, object]:
    _register_commands()
    return dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _signature(param: object) -> tuple[object, ...]:
    return (param.help, param.default, tuple(sorted(param.opts)),  # type: ignore[attr-defined]
            str(param.bare_type), param.multiple)  # type: ignore[attr-defined]


def test_every_command_takes_output_and_quiet_and_reports_take_format() -> None:
    for name, command in _commands().items():
        opts = {o for p in command.params for o in p.opts}  # type: ignore[attr-defined]
        assert "-o" in opts and {"--quiet", "-q"} <= opts, name
        if name not in DATA_WRITERS:
            assert {"--format", "-f"} <= opts, name


def test_a_shared_option_is_one_option() -> None:
    by_option: dict[str, dict[str, tuple[object, ...]]] = {}
    for name, command in _commands().items():
        for param in command.params:  # type: ignore[attr-defined]
            key = max(param.opts, key=len)
            if (key, name) not in OWN and key.startswith("--"):
                by_option.setdefault(key, {})[name] = _signature(param)
    for key, commands in by_option.items():
        groups = FAMILIES.get(key, (set(commands),))
        for group in groups:
            signatures = {commands[c] for c in group if c in commands}
            assert len(signatures) <= 1, (key, {c: commands[c] for c in group if c in commands})


def test_every_path_option_is_an_input_or_an_output() -> None:
    """Outputs are known by name; every other path is an input that no output may replace."""
    import typing

    found = set()
    for name, command in _commands().items():
        hints = typing.get_type_hints(command.callback)  # type: ignore[attr-defined]
        for param in command.params:  # type: ignore[attr-defined]
            if "Path" not in str(hints[param.name]):
                continue
            writes = any(o in ("-o", "--out", "--output") or o.endswith("-out")
                         for o in param.opts) or "write" in (param.help or "").lower()
            assert writes == (param.name in OUTPUT_OPTIONS), (name, param.name)
            found.add(param.name)
    assert set(OUTPUT_OPTIONS) <= found
