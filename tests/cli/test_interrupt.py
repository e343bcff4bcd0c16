"""Ctrl-C is exit 130, silent, and leaves nothing behind; `--debug` keeps every exit code.

The Ctrl-C cases run `python -m yaotu_trace ...` in a session of its own, as a shell runs a job,
and send SIGINT to its process group (as a terminal does) or to the command alone, at a few
points: while Python imports its libraries, while it reads the trace, while it works. No point
is a time on the clock, which a busy machine (load 10 on 2 cores) stretches at will. Each is an
event the test sees: first `trace` has installed its handler (the kernel then lists SIGTERM
and SIGHUP as caught for the process, which Python alone leaves at their default), then the
command's processes have used so much CPU time since. A second Ctrl-C waits until the command
has run on after the first. A try in which the command finished before the signal does not
count; it is tried again sooner. A clock limit is only a backstop for a hung command, and
generous; every process of a run is killed and reaped however the test ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pytest
from conftest import CHILD_TIMEOUT_S

from yaotu_trace.cli import interrupts, main
from yaotu_trace.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "chat.parquet"
# CPU seconds of the command from the moment its handler is installed to the signal: importing
# typer/pandas, reading the trace, the work itself.
DELAYS_S = (0.1, 0.6, 1.2)
# CPU seconds the command runs on after one Ctrl-C before the next: its cleanup is under way.
BETWEEN_SIGNALS_S = 0.02
ATTEMPTS_PER_DELAY = 4
# A backstop for a command that hangs, far above any run's time on a loaded machine: past it the
# command's processes are killed and reaped, and the test fails.
HUNG_S = CHILD_TIMEOUT_S
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
MODEL = ("--model", "Llama-3.1-8B", "--gpu", "H100")


def _trace(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "yaotu_trace", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True,
                            env=None if env is None else {**os.environ, **env})


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small generated traces (a few seconds of work per command) and the files around them.

    Made in this process: no child to wait for, so no clock limit that a busy machine breaks.
    """
    folder = tmp_path_factory.mktemp("inputs")
    for args in (("generate", "chat", "-n", "3000", "--out", "chat.parquet"),
                 ("generate", "diag-kv-churn", "--out", "churn.parquet",
                  "--steps-out", "churn.steps.parquet"),
                 ("convert", "chat.parquet", "--out", "chat.jsonl")):
        paths = [str(folder / a) if a.endswith((".parquet", ".jsonl")) else a for a in args]
        assert main([*paths, "--quiet"]) == ExitCode.OK
    (folder / "colocated.toml").write_text("instances = 2\n")
    (folder / "small-steps.toml").write_text("max-batched-tokens = 512\n")
    (folder / "checks.toml").write_text(
        '[[check]]\npath = "prefix_reuse.hit_ratio"\nop = ">="\nvalue = 0.4\n')
    return folder


@dataclass(frozen=True)
class Case:
    """A command line ({in}/{out}: the input and output folders) and the outputs it writes."""

    command: str
    outputs: tuple[str, ...]
    whole_group: bool = True  # SIGINT to the process group, as a terminal sends it
    times: int = 1  # Ctrl-C pressed this many times, the command running on between them
    compiles: bool = False  # with an empty numba cache: the Ctrl-C comes while numba compiles
    delays_s: tuple[float, ...] = DELAYS_S


SIMULATE = ("simulate {in}/chat.parquet " + " ".join(MODEL) + " --out {out}/sim.parquet "
            "--steps-out {out}/steps.parquet -o {out}/sim.txt")
REPLAY_JOBS = ("replay {in}/chat.parquet --scope instance --instances 4 --capacity 1Mtok "
               "--jobs 2 -o {out}/r.txt")
CASES = {
    "analyze": Case("analyze {in}/chat.parquet -o {out}/a.txt", ("a.txt",)),
    "replay": Case("replay {in}/chat.parquet --capacity 1Mtok -o {out}/r.txt", ("r.txt",)),
    "replay-jobs": Case(REPLAY_JOBS, ("r.txt",)),
    "replay-jobs-parent-only": Case(REPLAY_JOBS, ("r.txt",), whole_group=False),
    "replay-dask-local": Case("replay {in}/chat.parquet --capacity 1Mtok --capacity-per-tenant "
                              "--dask local -o {out}/r.txt", ("r.txt",),
                              delays_s=(1.5, 2.5, 3.5)),
    "replay-out": Case("replay {in}/chat.parquet --capacity 1Mtok --out {out}/hits.parquet "
                       "-o {out}/r.txt", ("hits.parquet", "r.txt")),
    "replay-compiling": Case("replay {in}/chat.parquet --capacity 1Mtok -o {out}/r.txt",
                             ("r.txt",), compiles=True, delays_s=(2.0, 3.0, 4.5)),
    "sweep": Case("sweep {in}/chat.parquet -o {out}/s.txt", ("s.txt",)),
    # the tier curve's passes on two threads: the ones not started are dropped
    "sweep-tier-jobs": Case("sweep {in}/chat.parquet --capacities 2000,8000 --tier "
                            "cpu=40000blocks --jobs 2 -o {out}/s.txt", ("s.txt",)),
    "diagnose": Case("diagnose {in}/churn.parquet --steps {in}/churn.steps.parquet "
                     "-o {out}/d.txt", ("d.txt",)),
    "simulate": Case(SIMULATE, ("sim.parquet", "steps.parquet", "sim.txt")),
    # a second and a third Ctrl-C while the first one's cleanup runs
    "simulate-three-times": Case(SIMULATE + " --stats", ("sim.parquet", "steps.parquet",
                                                         "sim.txt"), times=3),
    "compare": Case("compare {in}/chat.parquet --scenario {in}/colocated.toml --scenario "
                    "{in}/small-steps.toml " + " ".join(MODEL) + " -o {out}/c.txt", ("c.txt",)),
    "convert": Case("convert {in}/chat.jsonl --out {out}/conv.parquet", ("conv.parquet",)),
    "report": Case("report {in}/chat.parquet -o {out}/report.html", ("report.html",)),
    "check": Case("check {in}/chat.parquet --config {in}/checks.toml --junit {out}/j.xml "
                  "--markdown {out}/m.md -o {out}/check.txt", ("j.xml", "m.md", "check.txt")),
    "generate": Case("generate chat -n 3000 --out {out}/gen.parquet", ("gen.parquet",)),
}


def _group_stats(pgid: int) -> list[tuple[int, list[str]]]:
    """(pid, the fields of /proc/PID/stat after the name) of each process of a process group,
    zombies included: field 0 is the state, 11 and 12 user and system CPU ticks, 13 and 14
    those of the children it reaped."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = (Path("/proc") / entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            found.append((int(entry), fields))
    return found


def _group_members(pgid: int) -> list[int]:
    """Live processes of a process group (zombies are already gone for good)."""
    return [pid for pid, fields in _group_stats(pgid) if fields[0] != "Z"]


def _group_cpu_s(pgid: int) -> float:
    """CPU seconds a process group has used: its processes, and the children its leader reaped."""
    ticks = 0
    for pid, fields in _group_stats(pgid):
        ticks += int(fields[11]) + int(fields[12])
        if pid == pgid:
            ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS_PER_S


def _left_over(pgid: int, wait_s: float = HUNG_S) -> list[int]:
    """The group's processes still alive once they have had `wait_s` to exit (at once if none)."""
    deadline = time.monotonic() + wait_s
    while (members := _group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return members


def _kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of a group (its leader is reaped by the caller)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _handler_installed(pid: int) -> bool:
    """Whether `trace` has installed its signal handler in process `pid`: SIGTERM and SIGHUP are
    caught (`SigCgt` in /proc/PID/status, a mask whose bit N - 1 is signal N)."""
    try:
        status = (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return False
    caught = next((int(line.split()[1], 16) for line in status.splitlines()
                   if line.startswith("SigCgt:")), 0)
    return all(caught >> (signum - 1) & 1 for signum in (signal.SIGTERM, signal.SIGHUP))


def _wait_for(proc: subprocess.Popen[bytes], event: Callable[[], bool], what: str) -> bool:
    """Poll until `event()` holds; False if the command ended first. Only a hung command is
    limited (HUNG_S, far above any run on a loaded machine)."""
    started = time.monotonic()
    while proc.poll() is None:
        if event():
            return True
        if time.monotonic() - started > HUNG_S:
            raise AssertionError(f"{proc.args}: not {what} after {HUNG_S:.0f} s")
        time.sleep(0.01)
    return False


def _ran_for(proc: subprocess.Popen[bytes], cpu_s: float) -> bool:
    """Wait until the command has installed its handler and then used `cpu_s` of CPU; False if it
    ended first."""
    if not _wait_for(proc, lambda: _handler_installed(proc.pid), "handling signals"):
        return False
    start_s = _group_cpu_s(proc.pid)
    return _wait_for(proc, lambda: _group_cpu_s(proc.pid) - start_s >= cpu_s,
                     f"using {cpu_s} s of CPU")


def _cpu_beyond(pgid: int, cpu_s: float) -> Callable[[], bool]:
    """An event: the group has used `cpu_s` more of CPU than now."""
    start_s = _group_cpu_s(pgid)
    return lambda: _group_cpu_s(pgid) - start_s >= cpu_s


def _interrupted_run(args: list[str], delay_s: float, whole_group: bool, times: int = 1,
                     env: dict[str, str] | None = None) -> tuple[int, bytes, bytes, int] | None:
    """Run, SIGINT after `delay_s` of CPU: (exit code, stdout, stderr, group); None if it ended
    first. However it ends, the command and every process of its group are reaped or killed."""
    proc = _trace(*args, env=env)
    try:
        if not _ran_for(proc, delay_s):
            proc.communicate()
            return None
        for press in range(times):
            # the next Ctrl-C comes once the command has run on after the last (or ended)
            if press and not _wait_for(proc, _cpu_beyond(proc.pid, BETWEEN_SIGNALS_S),
                                       "running after Ctrl-C"):
                break
            if whole_group:
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=HUNG_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{proc.args}: still running {HUNG_S:.0f} s after Ctrl-C"
                                 ) from None
    finally:
        if proc.poll() is None:
            _kill_group(proc.pid)
            proc.communicate()
    if proc.returncode == 0:
        _kill_group(proc.pid)
        return None
    return proc.returncode, out, err, proc.pid


# Every case is interrupted at its last point, in its own work. The earlier points (imports,
# reading the trace) pass through the start-up that every command shares: the default run has
# them for `analyze` and the two worker-pool cases, `-m slow` for the others. The local Dask
# cluster repeats the in-process replay's check, at every point only with `-m slow`.
ALL_POINTS = frozenset({"analyze", "replay-jobs", "replay-jobs-parent-only"})


def _points() -> list[object]:
    points = []
    for name, case in CASES.items():
        for delay_s in case.delays_s:
            slow = "--dask" in case.command or (delay_s != case.delays_s[-1]
                                                and name not in ALL_POINTS)
            points.append(pytest.param(case, delay_s, id=f"{name}-{delay_s}",
                                       marks=[pytest.mark.slow] if slow else []))
    return points


@pytest.mark.parametrize(("case", "delay_s"), _points())
def test_ctrl_c_is_exit_130_silent_and_leaves_nothing(inputs: Path, tmp_path: Path,
                                                      case: Case, delay_s: float) -> None:
    if "--dask" in case.command:
        pytest.importorskip("dask.distributed", reason="the optional dask extra is not installed")
    for attempt in range(ATTEMPTS_PER_DELAY):
        out_dir = tmp_path / f"try-{attempt}"
        out_dir.mkdir()
        args = case.command.format(**{"in": inputs, "out": out_dir}).split()
        env = {"NUMBA_CACHE_DIR": str(tmp_path / f"numba-{attempt}")} if case.compiles else None
        run = _interrupted_run(args, delay_s / 2**attempt, case.whole_group, case.times, env)
        if run is None:
            continue  # finished before the signal: try again, sooner
        code, out, err, pgid = run
        where = f"{case.command} (SIGINT after {delay_s / 2**attempt:.3f} s of CPU)"
        try:
            assert code == ExitCode.INTERRUPTED, f"{where}: exit {code}\n{err.decode()}"
            assert err == b"", f"{where}: stderr\n{err.decode()}"
            assert out == b"", f"{where}: stdout\n{out.decode()}"
            left = sorted(p.name for p in out_dir.iterdir())
            # Nothing, or (the signal came as the command was ending) every output, whole.
            assert left in ([], sorted(case.outputs)), f"{where}: left {left}"
            assert _left_over(pgid) == [], f"{where}: processes left behind"
        finally:
            _kill_group(pgid)
        return
    pytest.fail(f"{case.command}: finished before every signal; make its input larger")


COMPILED_RESULTS = """
import sys
import numba
import numpy as np
from yaotu_trace.cli import interrupts

@numba.njit
def work(n):
    total = 0.0
    for i in range(n):
        total += (i % 7) * 0.5
    a = np.full(4, total)
    return a, a + 1, a + 2, a + 3, a + 4, a + 5, a + 6, a + 7, a + 8, a + 9, a + 10, a + 11

work(10)
{install}
print("ready", flush=True)
try:
    while True:
        first, *rest = work(3_000_000)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.slow
@pytest.mark.parametrize("install", ["interrupts.install()", ""], ids=["handled", "python"])
def test_ctrl_c_during_a_compiled_call_never_crashes(install: str) -> None:
    """The cause of the crash, shown directly: Python's own handler crashes; ours never does.

    A SIGINT during the compiled loop is acted on when numba boxes the returned arrays (it
    calls back into Python for each): a KeyboardInterrupt there leaves a NULL in the tuple.
    """
    crashes = 0
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", COMPILED_RESULTS.format(install=install)],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        # a few rounds of the compiled loop, however slowly the machine runs them
        _wait_for(proc, _cpu_beyond(proc.pid, 0.2), "running the compiled loop")
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=HUNG_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        if install:
            assert (proc.returncode, err) == (ExitCode.INTERRUPTED, b""), err.decode()
        else:
            crashes += proc.returncode != ExitCode.INTERRUPTED
    if not install:
        assert crashes > 0, "numba no longer crashes on a late KeyboardInterrupt; the " \
                            "deferral in yaotu_trace/cli/interrupts.py may be dropped"


def _function_in(module: str, name: str) -> Callable[[Callable[[], object]], object]:
    """A function `name` of `module` that calls its argument and returns what it returns."""
    namespace: dict[str, object] = {"__name__": module}
    exec(f"def {name}(inner):\n    return inner()\n", namespace)
    return namespace[name]  # type: ignore[return-value]


def _resume_in(module: str, name: str = "f") -> FrameType | None:
    """Where an interrupt that came in a function of `module` called from here is raised."""
    def check() -> FrameType | None:
        return interrupts.resume_frame(sys._getframe(1))
    return _function_in(module, name)(check)  # type: ignore[return-value]


def test_where_a_keyboard_interrupt_is_raised() -> None:
    here = sys._getframe()
    # own code, library code: there and then
    assert _resume_in("yaotu_trace.sim").f_code.co_name == "f"  # type: ignore[union-attr]
    assert _resume_in("pandas.core.frame").f_code.co_name == "f"  # type: ignore[union-attr]
    # numba's boxing callback, a finalizer, an atomic write's own steps: in their caller
    for module, name in (("numba.core.serialize", "_numba_unpickle"), ("pandas.io", "__del__"),
                         ("yaotu_trace.files", "replace_atomically"), ("tempfile", "mkstemp"),
                         ("shutil", "rmtree")):
        resume = _resume_in(module, name)
        assert resume is not None and resume.f_code.co_name == "_resume_in", (module, name)
    # what numba's callback calls (cloudpickle) waits for the callback's caller too
    unpickle = _function_in("numba.core.serialize", "_numba_unpickle")
    assert unpickle(lambda: _resume_in("cloudpickle.cloudpickle")) is here
    # a worker's launch (`--jobs`): what it calls to write the new process its orders waits
    # for the launch to end, so the worker never reads half of them
    launch = _function_in("multiprocessing.context", "_Popen")
    assert launch(lambda: _resume_in("multiprocessing.reduction", "dump")) is here
    # but a wait on the workers' pipes stays interruptible
    assert _resume_in("multiprocessing.connection", "wait").f_code.co_name == "wait"  # type: ignore[union-attr]
    assert interrupts.resume_frame(None) is None


@pytest.mark.parametrize("other_thread", [False, True], ids=["main-thread", "other-thread"])
def test_ctrl_c_while_a_scratch_folder_is_removed_removes_it_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other_thread: bool) -> None:
    """A `.ci/run` once left `trace convert`'s scratch folder behind: the signal landed in
    `shutil.rmtree`, where `tempfile.TemporaryDirectory` had already given up its finalizer.
    Here the signal comes at the first file removed: to the main thread, which holds it, or to
    another thread (as Arrow's may take it), whose handler sets the flag the main thread then
    acts on inside the removal."""
    import threading

    from yaotu_trace.files import scratch_folder

    removing = os.unlink
    sent: list[bool] = []

    def interrupt_from_another_thread() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # it inherits the mask
        signal.raise_signal(signal.SIGINT)

    def unlink_and_interrupt(*args: object, **kwargs: object) -> None:
        if not sent:
            sent.append(True)
            if other_thread:
                worker = threading.Thread(target=interrupt_from_another_thread)
                worker.start()
                worker.join()
            else:
                os.kill(os.getpid(), signal.SIGINT)
        removing(*args, **kwargs)  # type: ignore[arg-type]

    previous = interrupts.install()
    try:
        with (pytest.raises(KeyboardInterrupt),
              scratch_folder(tmp_path, prefix=".out.") as folder):
            for k in range(20):
                (folder / f"{k:06d}.parquet").write_bytes(b"x")
            monkeypatch.setattr(os, "unlink", unlink_and_interrupt)
        monkeypatch.undo()
        assert sent, "the removal never reached a file"
        assert list(tmp_path.iterdir()) == []
    finally:
        monkeypatch.undo()
        interrupts.restore(previous)


def test_debug_keeps_the_exit_code_of_a_usage_error(tmp_path: Path, capsys) -> None:
    args = ["simulate", str(SAMPLE), *MODEL, "--out", str(tmp_path / "timing.txt")]
    assert main(args) == ExitCode.USAGE
    plain = capsys.readouterr().err
    assert main(["--debug", *args]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "Traceback" in err and "ConfigError" in err
    assert err.rstrip().endswith(plain.rstrip())


def test_debug_keeps_the_exit_code_of_a_click_usage_error(capsys) -> None:
    assert main(["--debug", "analyze", str(SAMPLE), "--no-such-option"]) == ExitCode.USAGE
    assert "Traceback" in capsys.readouterr().err


def test_debug_keeps_the_exit_code_of_a_bad_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    assert main(["--debug", "analyze", str(bad)]) == ExitCode.INPUT
    err = capsys.readouterr().err
    assert "Traceback" in err and f"error: {bad}" in err


def test_debug_keeps_the_exit_code_of_an_internal_error(monkeypatch: pytest.MonkeyPatch,
                                                        capsys) -> None:
    from yaotu_trace.commands import analyze as pipeline

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(pipeline, "analyze", broken)
    assert main(["analyze", str(SAMPLE)]) == ExitCode.INTERNAL
    assert "Traceback" not in capsys.readouterr().err
    assert main(["--debug", "analyze", str(SAMPLE)]) == ExitCode.INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: a bug" in err


def test_debug_keeps_the_exit_code_of_an_interrupt(monkeypatch: pytest.MonkeyPatch,
                                                   capsys) -> None:
    from yaotu_trace.commands import analyze as pipeline

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "analyze", interrupted)
    assert main(["analyze", str(SAMPLE)]) == ExitCode.INTERRUPTED
    assert capsys.readouterr() == ("", "")
    assert main(["--debug", "analyze", str(SAMPLE)]) == ExitCode.INTERRUPTED
