"""Outputs: never onto an input, written as Unix users expect, both or neither.

Every command and every output flag is pointed at every input it reads, spelled as `./x`, as an
absolute path and through a symlink: the command refuses before any work (exit 3, one line
naming both) and the input's bytes are unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import CHILD_TIMEOUT_S, FIXTURES

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
MODEL = ["--model", "Llama-3.1-8B", "--gpu", "H100"]


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with copies of the inputs the commands read, as the working directory."""
    for name in ("diag-burst.parquet", "diag-burst.steps.parquet"):
        (tmp_path / name).write_bytes((SAMPLES / name).read_bytes())
    (tmp_path / "checks.toml").write_text(
        '[[check]]\npath = "prefix_reuse.hit_ratio"\nop = ">="\nvalue = 0.0\n')
    (tmp_path / "a.toml").write_text("max-num-seqs = 64\n")
    (tmp_path / "b.toml").write_text("max-num-seqs = 128\n")
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", "diag-burst.parquet", "-f", "json", "-o", "base.json"]) == 0
    return tmp_path


T, S = "diag-burst.parquet", "diag-burst.steps.parquet"
# (command line without the output, output flag, the inputs that flag may not replace)
CASES = [
    (["analyze", T, "--steps", S], "-o", [T, S]),
    (["replay", T], "-o", [T]),
    (["replay", T], "--out", [T]),
    (["sweep", T], "-o", [T]),
    (["diagnose", T, "--steps", S], "-o", [T, S]),
    (["report", T, "--steps", S], "-o", [T, S]),
    (["check", T, "--config", "checks.toml", "--baseline", "base.json"], "-o",
     [T, "checks.toml", "base.json"]),
    (["check", T, "--config", "checks.toml"], "--junit", [T, "checks.toml"]),
    (["check", T, "--config", "checks.toml"], "--markdown", [T, "checks.toml"]),
    (["simulate", T, *MODEL, "--scenario", "a.toml", "--out", "sim.parquet"], "--steps-out",
     [T, "a.toml"]),
    (["simulate", T, *MODEL, "--steps-out", "steps.parquet"], "--out", [T]),
    (["simulate", T, *MODEL, "--out", "sim.parquet"], "-o", [T]),
    (["compare", T, *MODEL, "--scenario", "a.toml", "--scenario", "b.toml"], "-o",
     [T, "a.toml", "b.toml"]),
    (["convert", T], "--out", [T]),
]


def _spellings(work: Path, name: str) -> list[str]:
    link = work / f"link-to-{name}"
    if not link.exists():
        link.symlink_to(work / name)
    return [f"./{name}", str(work / name), link.name]


@pytest.mark.parametrize(("args", "flag", "inputs"), CASES,
                         ids=[f"{c[0][0]}{c[1]}" for c in CASES])
def test_no_output_replaces_an_input(work: Path, capsys: pytest.CaptureFixture[str],
                                     args: list[str], flag: str, inputs: list[str]) -> None:
    for name in inputs:
        before = (work / name).read_bytes()
        for spelled in _spellings(work, name):
            code = main([*args, flag, spelled])
            err = capsys.readouterr().err
            assert code == ExitCode.INPUT, (args, flag, spelled, err)
            assert err.count("\n") == 1 and f"{flag} {Path(spelled)}: is the input" in err
            assert name in err.split("is the input", 1)[1]
            assert (work / name).read_bytes() == before
    assert sorted(p.name for p in work.iterdir() if p.name.startswith(".")) == []


def test_two_outputs_may_not_name_one_file(work: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    code = main(["simulate", T, *MODEL, "--out", "x.parquet", "--steps-out", "./x.parquet"])
    assert code == ExitCode.INPUT and "name the same output" in capsys.readouterr().err
    assert not (work / "x.parquet").exists()


def test_a_hard_link_to_the_trace_is_the_trace(work: Path, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    os.link(work / T, work / "hard.parquet")
    assert main(["analyze", T, "-o", "hard.parquet"]) == ExitCode.INPUT
    assert "is the input TRACE" in capsys.readouterr().err


def test_nothing_is_written_into_a_trace_folder(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "weka"
    folder.mkdir()
    for f in (FIXTURES / "weka_mini").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    names = sorted(p.name for p in folder.iterdir())
    assert main(["analyze", str(folder), "-o", str(folder / "report.txt")]) == ExitCode.INPUT
    assert "inside the trace folder" in capsys.readouterr().err
    assert main(["analyze", str(folder), "-o", str(folder / names[0])]) == ExitCode.INPUT
    assert sorted(p.name for p in folder.iterdir()) == names


@pytest.mark.parametrize("target", ["/proc/version", "/proc/no-such/x.json",
                                    "no-such-folder/x.json", "."])
def test_unwritable_targets_are_input_errors(work: Path, capsys: pytest.CaptureFixture[str],
                                             target: str) -> None:
    assert main(["analyze", T, "-o", target]) == ExitCode.INPUT
    err = capsys.readouterr().err
    assert err.startswith(f"error: -o {target}: ") and err.count("\n") == 1


def test_dash_is_stdout(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", T, "-f", "json", "-o", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["command"] == "analyze"
    assert not (work / "-").exists()


@pytest.mark.parametrize(("name", "check"), [
    ("r.json", lambda text: json.loads(text)["command"] == "analyze"),
    ("r.md", lambda text: text.startswith("#")),
    ("r.html", lambda text: text.lstrip().lower().startswith("<!doctype html")),
    ("r.txt", lambda text: text.startswith("yaotu-trace analyze")),
    ("r", lambda text: text.startswith("yaotu-trace analyze")),
])
def test_the_extension_of_o_picks_the_format(work: Path, name: str, check) -> None:
    assert main(["analyze", T, "-o", name]) == 0
    assert check((work / name).read_text())


def test_format_given_wins_over_the_extension(work: Path) -> None:
    assert main(["analyze", T, "-f", "json", "-o", "r.txt"]) == 0
    assert json.loads((work / "r.txt").read_text())["command"] == "analyze"


@pytest.mark.parametrize("name", ["hits.parquet", "r.csv", "r.jsonl", "r.json.gz"])
def test_a_data_extension_for_a_text_report_is_refused(work: Path, name: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", T, "-o", name]) == ExitCode.USAGE
    assert "names a data file" in capsys.readouterr().err
    assert not (work / name).exists()


def test_a_symlink_target_updates_the_file_it_points_to(work: Path) -> None:
    (work / "real.json").write_text("old")
    (work / "out.json").symlink_to("real.json")
    assert main(["analyze", T, "-o", "out.json"]) == 0
    assert (work / "out.json").is_symlink()
    assert json.loads((work / "real.json").read_text())["command"] == "analyze"


def test_both_outputs_or_neither(work: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A failure after `--out` is written but before the report leaves neither file."""
    import yaotu_trace.cli.app as app

    def broken(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "render", broken)
    code = main(["replay", T, "--out", "hits.parquet", "-o", "r.json"])
    assert code == ExitCode.INTERRUPTED
    monkeypatch.undo()
    monkeypatch.chdir(work)
    left = sorted(p.name for p in work.iterdir())
    assert "hits.parquet" not in left and "r.json" not in left
    assert not [n for n in left if n.startswith(".")]
    assert main(["replay", T, "--out", "hits.parquet", "-o", "r.json"]) == 0
    capsys.readouterr()
    assert (work / "hits.parquet").stat().st_size > 0 and (work / "r.json").stat().st_size > 0


def _cli(args: list[str], cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run([sys.executable, "-m", "yaotu_trace", *args], cwd=cwd,
                          timeout=CHILD_TIMEOUT_S, check=False,
                          **streams)  # type: ignore[call-overload]


def test_dev_stdout_and_dev_fd_are_written_directly(work: Path) -> None:
    for target in ("/dev/stdout", "/dev/fd/1"):
        done = _cli(["analyze", T, "-f", "json", "-o", target], work)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["command"] == "analyze"


def test_a_fifo_is_written_directly_and_stays_a_fifo(work: Path) -> None:
    fifo = work / "report.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with fifo.open("rb") as fh:
            received.append(fh.read())

    reader = threading.Thread(target=read)
    reader.start()
    done = _cli(["analyze", T, "-f", "json", "-o", str(fifo)], work)
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(received[0])["command"] == "analyze"
    assert fifo.is_fifo()


def test_a_full_disk_is_a_write_error_not_a_crash(work: Path) -> None:
    with open("/dev/full", "wb") as full:
        done = _cli(["analyze", T], work, stdout=full)
    assert done.returncode == ExitCode.IO
    assert done.stderr.decode().startswith("error: stdout: no space left on the disk: it needs ")
    done = _cli(["analyze", T, "-o", "/dev/full"], work)
    assert done.returncode == ExitCode.IO and b"/dev/full: no space left" in done.stderr
