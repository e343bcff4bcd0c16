"""Faults of the machine around a run: a full disk or file-size limit, SIGTERM and SIGHUP,
closed or odd streams, a trace given as a named pipe.

Each case runs `python -m yaotu_trace ...` as a real process (bounded by a timeout, and killed
with its process group when it outlives it) and checks the exit code, the one line on stderr
and that nothing is left beside the outputs. Where the machine cannot make a fault (no
`unshare`, no /dev/full) the case is skipped.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode, WriteError
from yaotu_trace.files import replace_atomically

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
TIMEOUT_S = 120.0
MODEL = ("--model", "Llama-3.1-8B", "--gpu", "H100")
LIMIT_BYTES = 10 * 1024  # `ulimit -f 10`


def _start(args: list[str], cwd: Path = REPO, *, env: dict[str, str] | None = None,
           **kwargs: object) -> subprocess.Popen[bytes]:
    streams: dict[str, object] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    return subprocess.Popen([sys.executable, "-m", "yaotu_trace", *args], cwd=cwd,
                            start_new_session=True,
                            env=None if env is None else {**os.environ, **env},
                            **{**streams, **kwargs})  # type: ignore[call-overload]


def _finish(proc: subprocess.Popen[bytes], timeout_s: float = TIMEOUT_S
            ) -> tuple[int, bytes, bytes]:
    """Wait for the process; one that outlives the timeout is killed with its group, reaped,
    and fails the test."""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{proc.args}: still running after {timeout_s:.0f} s; killed")
    return proc.returncode, out or b"", err or b""


def _trace(args: list[str], cwd: Path = REPO, **kwargs: object) -> tuple[int, bytes, bytes]:
    return _finish(_start(args, cwd, **kwargs))


def _file_size_limit() -> None:
    """preexec_fn: `ulimit -f 10`, with SIGXFSZ ignored so that write() fails with EFBIG."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, LIMIT_BYTES))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated trace (a few seconds of work per command) as Parquet and JSONL."""
    folder = tmp_path_factory.mktemp("inputs")
    for args in (["generate", "chat", "-n", "3000", "--out", "chat.parquet"],
                 ["convert", "chat.parquet", "--out", "chat.jsonl"]):
        code, _, err = _trace(args, folder)
        assert code == 0, err.decode()
    return folder


# ---------------------------------------------------------------- a full disk, a size limit

# (command line; {in}: the samples, {out}: the output folder), the output the line names, and
# whether it compiles numba functions (whose cache is a file too: filled by a run before)
LIMITED = {
    "convert-parquet": ("convert {in}/chat.parquet --out {out}/c.parquet", "c.parquet", False),
    "convert-parquet-in-parts": ("convert {in}/bursty.jsonl --out {out}/c.parquet", "c.parquet",
                                 False),
    "convert-csv": ("convert {in}/chat.parquet --out {out}/c.csv", "c.csv", False),
    "report": ("report {in}/chat.parquet -o {out}/r.html", "r.html", True),
    "replay-two-outputs": ("replay {in}/chat.parquet --out {out}/hits.parquet -o {out}/r.txt",
                           "hits.parquet", True),
}


@pytest.mark.parametrize(("command", "named", "compiles"), LIMITED.values(), ids=LIMITED.keys())
def test_file_size_limit_is_exit_5_naming_the_output_and_leaves_nothing(
        tmp_path: Path, command: str, named: str, compiles: bool) -> None:
    # GIVEN numba's compile cache filled (by a run without the limit)
    if compiles:
        code, _, err = _trace(command.format(**{"in": SAMPLES, "out": tmp_path}).split())
        assert code == 0, err.decode()
    limited = tmp_path / "limited"
    limited.mkdir()
    # WHEN the command runs under `ulimit -f 10`
    args = command.format(**{"in": SAMPLES, "out": limited}).split()
    code, out, err = _trace(args, preexec_fn=_file_size_limit)
    # THEN one line names the output and the limit, and no output or temporary file is left
    line = err.decode()
    assert code == ExitCode.IO, line
    assert line.startswith(f"error: {limited / named}: file too large: it needs "), line
    assert f"file-size limit (ulimit -f) is {LIMIT_BYTES:,} bytes" in line, line
    assert line.count("\n") == 1 and "internal error" not in line, line
    assert out == b""
    assert sorted(p.name for p in limited.iterdir()) == []


def test_dev_full_as_stdout_or_output_is_exit_5_with_the_bytes_needed() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this machine")
    with open("/dev/full", "wb") as full:
        code, _, err = _trace(["analyze", str(SAMPLES / "diag-burst.parquet")], stdout=full)
    assert code == ExitCode.IO, err.decode()
    assert err.decode().startswith("error: stdout: no space left on the disk: it needs ")
    code, _, err = _trace(["analyze", str(SAMPLES / "diag-burst.parquet"), "-f", "json", "-o",
                           "/dev/full"])
    assert code == ExitCode.IO, err.decode()
    assert err.decode().startswith("error: /dev/full: no space left on the disk: it needs ")


TINY_FS = """
tiny=$1
shift
mount -t tmpfs -o size=16k tmpfs "$tiny" || exit 99
"$@"
echo "exit $?"
ls -A "$tiny"
"""


def test_a_full_filesystem_is_exit_5_naming_the_output_and_leaves_nothing(
        tmp_path: Path) -> None:
    """On a 16 KiB filesystem mounted in a user namespace (`unshare -rm`, no root needed)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare: cannot mount a small filesystem")
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    script = tmp_path / "run.sh"
    script.write_text(TINY_FS)
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs tmpfs {tiny}"],
                           capture_output=True, timeout=30, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a filesystem in a user namespace: {probe.stderr.decode()}")
    for command, named, _compiles in (LIMITED["report"], LIMITED["replay-two-outputs"],
                                      LIMITED["convert-parquet-in-parts"]):
        args = command.format(**{"in": SAMPLES, "out": tiny}).split()
        proc = subprocess.Popen(["unshare", "-rm", "sh", str(script), str(tiny),
                                 sys.executable, "-m", "yaotu_trace", *args], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        _, out, err = _finish(proc)
        status, _, left = out.decode().partition("\n")
        line = err.decode()
        assert status == f"exit {ExitCode.IO}", (command, status, line)
        assert line.startswith(f"error: {tiny / named}: no space left on the disk"), line
        assert f"'{tiny}' has " in line and line.count("\n") == 1, line
        assert left.split() == [], (command, left)


def test_a_write_that_runs_out_of_room_leaves_no_temporary_file(tmp_path: Path) -> None:
    def write(tmp: Path) -> None:
        tmp.write_bytes(b"12345")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(WriteError) as raised:
        replace_atomically(tmp_path / "out.parquet", write)
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'out.parquet'}: no space left on the disk: it "
                              "needs more than the 5 bytes written; ")
    assert f"'{tmp_path}' has " in message
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(WriteError, match="it needs 9 bytes"):
        replace_atomically(tmp_path / "r.txt", write, size_bytes=9)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_outside_the_outputs_is_exit_5_not_a_bug(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """numba's compile cache, a scratch folder: the user's situation all the same."""
    from yaotu_trace.commands import analyze as pipeline

    def no_room(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(pipeline, "analyze", no_room)
    assert main(["analyze", str(SAMPLES / "chat.parquet")]) == ExitCode.IO
    err = capsys.readouterr().err
    assert err.startswith("error: a working file of the run (a cache or scratch file): file "
                          "too large"), err
    assert "internal error" not in err


# ---------------------------------------------------------------- SIGTERM and SIGHUP

SIGNALLED = {
    "convert-parquet": ("convert {in}/chat.jsonl --out {out}/c.parquet", ("c.parquet",)),
    "convert-csv": ("convert {in}/chat.jsonl --out {out}/c.csv", ("c.csv",)),
    "generate": ("generate chat -n 3000 --out {out}/g.parquet", ("g.parquet",)),
    "simulate": ("simulate {in}/chat.parquet " + " ".join(MODEL) + " --out {out}/s.parquet "
                 "--steps-out {out}/steps.parquet -o {out}/s.txt",
                 ("s.parquet", "s.txt", "steps.parquet")),
}
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}


def _signal_when_writing(args: list[str], out_dir: Path, signum: int,
                         delay_s: float | None) -> tuple[int, bytes, bytes] | None:
    """Run; signal the process after `delay_s`, or (None) as soon as a temporary file appears
    in `out_dir`: its (exit, stdout, stderr), or None when it finished first."""
    proc = _start(args)
    deadline = time.monotonic() + (TIMEOUT_S if delay_s is None else delay_s)
    while proc.poll() is None and time.monotonic() < deadline:
        if delay_s is None and any(p.name.startswith(".") for p in out_dir.iterdir()):
            break
        time.sleep(0.005)
    if proc.poll() is not None:
        _finish(proc)
        return None
    proc.send_signal(signum)
    run = _finish(proc)
    return None if run[0] == 0 else run  # the signal came once it had finished


@pytest.mark.parametrize("name", SIGNALS.keys())
@pytest.mark.parametrize(("command", "outputs"), SIGNALLED.values(), ids=SIGNALLED.keys())
def test_sigterm_and_sighup_exit_128_plus_the_signal_and_leave_nothing(
        inputs: Path, tmp_path: Path, command: str, outputs: tuple[str, ...],
        name: str) -> None:
    """The signal comes while a temporary file is being written (else, after a delay)."""
    signum = SIGNALS[name]
    for attempt, delay_s in enumerate((None, None, 0.8, 0.4)):
        out_dir = tmp_path / str(attempt)
        out_dir.mkdir()
        args = command.format(**{"in": inputs, "out": out_dir}).split()
        run = _signal_when_writing(args, out_dir, signum, delay_s)
        if run is None:
            continue  # finished before the signal: again
        code, out, err = run
        assert code == 128 + signum, f"{command}: exit {code}\n{err.decode()}"
        assert (out, err) == (b"", b""), err.decode()
        left = sorted(p.name for p in out_dir.iterdir())
        # Nothing, or (the signal came as the command was ending) every output, whole.
        assert left in ([], sorted(outputs)), f"{command}: left {left}"
        return
    pytest.fail(f"{command}: finished before every {name}; make its input larger")


def _group_alive(pgid: int, wait_s: float = 10.0) -> list[int]:
    """Live (not zombie) processes of a process group, once `wait_s` has let them end."""
    deadline = time.monotonic() + wait_s
    while True:
        members = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = (Path("/proc") / entry / "stat").read_text()
            except OSError:
                continue
            state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]
            if int(group) == pgid and state != "Z":
                members.append(int(entry))
        if not members or time.monotonic() > deadline:
            return members
        time.sleep(0.05)


@pytest.mark.parametrize("name", SIGNALS.keys())
def test_a_signal_to_the_whole_group_stops_the_workers_quietly(inputs: Path, tmp_path: Path,
                                                              name: str) -> None:
    """`--jobs 2`: the workers and multiprocessing's resource tracker get the signal too (a
    closed terminal's SIGHUP, `kill -TERM -PGID`); none of them prints or is left."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc to list the process group")
    signum = SIGNALS[name]
    args = ["replay", str(inputs / "chat.parquet"), "--scope", "instance", "--instances", "4",
            "--capacity", "1Mtok", "--jobs", "2", "-o", str(tmp_path / "r.txt")]
    for delay_s in (2.0, 1.0, 0.5):
        proc = _start(args)
        time.sleep(delay_s)
        if proc.poll() is not None:
            _finish(proc)
            (tmp_path / "r.txt").unlink(missing_ok=True)  # finished first: try sooner
            continue
        os.killpg(proc.pid, signum)
        code, out, err = _finish(proc)
        if code == 0:
            (tmp_path / "r.txt").unlink()
            continue  # the signal came once it had finished
        assert code == 128 + signum, err.decode()
        assert (out, err) == (b"", b""), err.decode()
        assert list(tmp_path.iterdir()) == []
        assert _group_alive(proc.pid) == [], "processes left behind"
        return
    pytest.fail("the replay finished before every signal; make its input larger")


# ---------------------------------------------------------------- streams


def _close_stdout() -> None:
    os.close(1)


def test_a_closed_stdout_is_one_line_and_exit_5(tmp_path: Path) -> None:
    trace = str(SAMPLES / "diag-burst.parquet")
    code, _, err = _trace(["analyze", trace], preexec_fn=_close_stdout)
    assert code == ExitCode.IO, err.decode()
    assert err.decode() == ("error: stdout: is closed, so the report has nowhere to go; "
                            "redirect it (> report.txt) or pass -o FILE\n")
    # a command whose outputs are files does not need stdout
    code, _, err = _trace(["analyze", trace, "-o", str(tmp_path / "a.txt")],
                          preexec_fn=_close_stdout)
    assert code == 0, err.decode()
    assert (tmp_path / "a.txt").read_text().startswith("yaotu-trace analyze")


@pytest.mark.parametrize("args", [
    ["analyze", "{in}/diag-burst.parquet", "-f", "json"],
    ["check", "{in}/diag-burst.parquet", "--config", "{tmp}/failing.toml"],  # 1 if read whole
    ["--help"],
], ids=["analyze", "check", "help"])
def test_a_reader_that_closes_the_pipe_is_exit_141_and_quiet(tmp_path: Path,
                                                             args: list[str]) -> None:
    (tmp_path / "failing.toml").write_text(
        '[[check]]\npath = "prefix_reuse.hit_ratio"\nop = ">="\nvalue = 2.0\n')
    proc = _start([a.format(**{"in": SAMPLES, "tmp": tmp_path}) for a in args])
    assert proc.stdout is not None
    proc.stdout.close()  # the reader leaves before the report is written (`| true`)
    code, _, err = _finish(proc)
    assert (code, err) == (ExitCode.BROKEN_PIPE, b""), err.decode()


def test_a_trace_given_as_a_named_pipe_is_refused_in_one_line(tmp_path: Path) -> None:
    for name in ("p.parquet", "p.jsonl"):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        code, _, err = _trace(["analyze", str(fifo)])
        assert code == ExitCode.INPUT, err.decode()
        assert err.decode() == (
            f"error: {fifo}: is a named pipe (or a process substitution), which can be read "
            "only once, and TRACE is read more than once; save it to a file first and give "
            "that file\n")
    code, _, err = _trace(["diagnose", str(SAMPLES / "diag-burst.parquet"), "--steps",
                           str(tmp_path / "p.parquet")])
    assert code == ExitCode.INPUT and "and --steps is read more than once" in err.decode()


def _feed(fifo: Path, text: str) -> threading.Thread:
    def write() -> None:
        with fifo.open("w") as fh:
            fh.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


def test_a_check_file_may_be_a_named_pipe(tmp_path: Path) -> None:
    """`--config <(...)`: read once, whole, so a stream is fine."""
    fifo = tmp_path / "checks.toml"
    os.mkfifo(fifo)
    writer = _feed(fifo, '[[check]]\npath = "prefix_reuse.hit_ratio"\nop = ">="\nvalue = 0\n')
    code, out, err = _trace(["check", str(SAMPLES / "diag-burst.parquet"), "--config",
                             str(fifo)])
    writer.join(timeout=10)
    assert code == 0, err.decode()
    assert b"1 passed" in out


def test_an_ascii_stdout_gets_ascii_stand_ins_not_a_crash(tmp_path: Path) -> None:
    named = tmp_path / "tést.parquet"
    named.write_bytes((SAMPLES / "chat.parquet").read_bytes())
    ascii_env = {"PYTHONIOENCODING": "ascii"}
    # named relative to its folder: the table shortens a long path, such as a deep temporary one
    code, out, err = _trace(["analyze", named.name, "--charts"], cwd=tmp_path, env=ascii_env)
    assert code == 0, err.decode()
    text = out.decode("ascii")  # every byte is ASCII
    assert "t\\xe9st.parquet" in text and "x mean)" in text, text[:2000]
    code, out, err = _trace(["analyze", str(tmp_path / "nope-é.jsonl")], env=ascii_env)
    assert code == ExitCode.INPUT
    assert err.decode("ascii").startswith(f"error: {tmp_path}/nope-\\xe9.jsonl: no such file")


def _stand_in(text: str) -> str:
    """What an ASCII stream writes for `text`."""
    from yaotu_trace.cli import streams

    return text.encode("ascii", streams.FALLBACK).decode("ascii")


def test_ascii_stand_ins_for_the_reports_symbols() -> None:
    assert _stand_in("8.23× mean") == "8.23x mean"
    assert _stand_in("─┼│ 5 → 6 ≥ 2 −1") == "-+| 5 -> 6 >= 2 -1"
    assert _stand_in("résumé.jsonl") == "r\\xe9sum\\xe9.jsonl"



def test_a_non_blocking_stdout_gets_the_whole_report(tmp_path: Path) -> None:
    """A pipe made non-blocking by its parent (Node.js, asyncio): once the pipe is full a write
    fails with EAGAIN, and the report was cut at 64 KiB with exit 0. It must arrive whole."""
    import fcntl

    read_end, write_end = os.pipe()
    flags = fcntl.fcntl(write_end, fcntl.F_GETFL)
    fcntl.fcntl(write_end, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    proc = _start(["report", str(SAMPLES / "chat.parquet"), "-o", "-"], stdout=write_end)
    os.close(write_end)
    time.sleep(2.0)  # the report fills the pipe while nobody reads it
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        while chunk := pipe.read(65536):
            chunks.append(chunk)
    code, _, err = _finish(proc)
    page = b"".join(chunks)
    assert code == 0, err.decode()
    assert len(page) > 65536 and page.rstrip().endswith(b"</html>")
