"""`cli/coercion.py`: the command line's values come out as typer's own coercion makes them,
good and bad alike (the same report, the same message, the same exit code)."""

from __future__ import annotations

from pathlib import Path

import pytest

from yaotu_trace.cli import coercion, main

CHAT = str(Path(__file__).resolve().parents[2] / "sample_traces" / "chat.parquet")

CASES = [
    ["sweep", CHAT, "-f", "json"],
    ["sweep", CHAT, "--preset", "VLLM", "-f", "JSON", "--points", "5"],
    ["sweep", CHAT, "--preset", "nope"],
    ["sweep", CHAT, "--points", "1"],
    ["sweep", CHAT, "--points", "x"],
    ["sweep", "", "-f", "json"],
    ["sweep", "/no/such/trace.parquet"],
    ["sweep", CHAT, "-f", "json", "-o", "/"],
    ["replay", CHAT, "--map", "arrival_s=arrival_s", "--capacity", "2000", "-f", "json"],
    ["analyze", CHAT, "--input-format", "mooncake"],
    ["sweep", "--help"],
]


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a[2:] or a[:2]))
def test_values_come_out_as_typer_makes_them(args: list[str], capsys, monkeypatch) -> None:
    # GIVEN one command line, run with the light coercion and with typer's alone
    light = main(args), *capsys.readouterr()
    monkeypatch.setattr(coercion, "lighten", lambda command: None)
    typer_only = main(args), *capsys.readouterr()
    # THEN the exit code, the report and the message are the same
    assert light == typer_only


def test_every_parameter_starts_light() -> None:
    import typer.main

    from yaotu_trace.cli import _register_commands
    from yaotu_trace.cli.app import app

    _register_commands()
    command = typer.main.get_command(app)
    coercion.lighten(command)
    for sub in command.commands.values():  # type: ignore[attr-defined]
        for param in sub.params:
            assert isinstance(param._runtime_param, coercion.LightCoercion), param.name
