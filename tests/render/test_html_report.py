"""`trace report`: one self-contained HTML page, checked as text and in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import CHILD_TIMEOUT_S

from tests.conftest import shared_trace
from yaotu_trace.cli import main
from yaotu_trace.errors import ExitCode

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces"
PLOTS = ("capacity_curve", "waterfall", "hit_length", "queue_time", "ttft", "kv_over_time", "gaps")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="module")
def timed_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A simulated trace with queue, first-token and per-token times plus a step log."""
    root = tmp_path_factory.mktemp("html")
    trace, req, steps = root / "chat.parquet", root / "sim.parquet", root / "steps.parquet"
    assert main(["generate", "chat", "--requests", "300", "--seed", "5", "--rate", "4",
                 "--out", str(trace)]) == ExitCode.OK
    assert main(["simulate", str(trace), "--model", "Llama-3.1-8B", "--gpu", "H100",
                 "--kv-blocks", "1500", "--out", str(req), "--steps-out", str(steps),
                 "-f", "json"]) == ExitCode.OK
    return req, steps


@pytest.fixture(scope="module")
def full_report(timed_trace: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    req, steps = timed_trace
    out = tmp_path_factory.mktemp("page") / "report.html"
    assert main(["report", str(req), "--steps", str(steps), "-o", str(out)]) == ExitCode.OK
    return out


@pytest.fixture(scope="module")
def starved_run(timed_trace: tuple[Path, Path]) -> tuple[Path, Path]:
    """The same 300 requests with a KV pool of 400 blocks instead of 1,500."""
    req, _ = timed_trace
    root = req.parent
    starved, steps = root / "starved.parquet", root / "starved.steps.parquet"
    assert main(["simulate", str(root / "chat.parquet"), "--model", "Llama-3.1-8B", "--gpu",
                 "H100", "--kv-blocks", "400", "--out", str(starved), "--steps-out", str(steps),
                 "-f", "json", "-o", str(root / "starved.json")]) == ExitCode.OK
    return starved, steps


@pytest.fixture(scope="module")
def two_run_report(timed_trace: tuple[Path, Path], starved_run: tuple[Path, Path],
                   tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`trace report` of the starved run against the roomy one before it."""
    (req, steps), (starved, starved_steps) = timed_trace, starved_run
    out = tmp_path_factory.mktemp("diff-page") / "diff.html"
    assert main(["report", str(starved), "--steps", str(starved_steps), "--before", str(req),
                 "--steps-before", str(steps), "--gpu", "H100", "-o", str(out)]) == ExitCode.OK
    return out


PAGES = ("full_report", "two_run_report")


def test_report_html_draws_every_plot_inline(full_report: Path) -> None:
    page = full_report.read_text(encoding="utf-8")
    for name in PLOTS:
        match = re.search(rf'<svg class="plot" data-plot="{name}".*?</svg>', page, re.S)
        assert match, f"plot {name} missing"
        assert 'class="mark' in match.group(0), f"plot {name} has no marks"
    assert "Not available" not in page and "not-drawn" not in page
    assert "Per tenant" in page and "Ledger" in page and "Verdict" in page


@pytest.mark.parametrize("which", PAGES)
def test_report_html_fetches_nothing(which: str, request: pytest.FixtureRequest) -> None:
    page = request.getfixturevalue(which).read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=|<link[^>]+stylesheet|@import|url\(", page)
    # The SVG namespace is an identifier, not a fetch; no other address appears.
    addresses = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert addresses <= {"http://www.w3.org/2000/svg"}


def test_report_missing_columns_say_why(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(SAMPLE / "multitenant.csv"), "-o", str(out)]) == ExitCode.OK
    page = out.read_text(encoding="utf-8")
    # Nothing empty: the panels the trace cannot fill are one line naming what each needs.
    assert "Not available" not in page and 'class="unavailable"' not in page
    line = re.search(r'<p class="note not-drawn">Not drawn: (.*?)</p>', page)
    assert line is not None
    assert "time to first token (needs first_token_s per request)" in line.group(1)
    # The timing panels say how modelled times would fill them.
    assert "<code>trace report --simulate --model M --gpu G</code>" in line.group(1)
    assert capsys.readouterr().out == ""


def test_report_is_deterministic_and_has_json(timed_trace: tuple[Path, Path], capsys) -> None:
    req, steps = timed_trace
    runs = []
    for fmt in ("html", "html", "json"):
        assert main(["report", str(req), "--steps", str(steps), "-f", fmt]) == ExitCode.OK
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1]
    doc = json.loads(runs[2])
    assert doc["command"] == "report"
    assert doc["plots"]["ttft"]["total"] == 300
    assert 0.99 * 1500 * 16 <= doc["config"]["kv_capacity_tokens"] <= 1500 * 16


@pytest.mark.parametrize(("kv_options", "kv_bytes_per_token"), [
    # Llama-3.1-8B: 32 layers × 8 KV heads × 128 head_dim × 2 (K and V) × 2 bytes (bf16)
    (["--model", "llama-3.1-8b"], 32 * 8 * 128 * 2 * 2),
    # --kv-bytes-per-token overrides the model's, as it does for the diagnosis on the same page
    (["--model", "llama-3.1-8b", "--kv-bytes-per-token", "1000"], 1000),
])
def test_report_curve_is_in_bytes_with_a_model(kv_options: list[str], kv_bytes_per_token: int,
                                               capsys) -> None:
    assert main(["report", str(SAMPLE / "multitenant.csv"), *kv_options, "-f", "json",
                 "-q"]) == ExitCode.OK
    curve = json.loads(capsys.readouterr().out)["capacity_curve"]
    assert curve["kv_bytes_per_token"] == kv_bytes_per_token
    assert not any("capacities in bytes need" in note for note in curve["notes"])
    for point in (*curve["points"], curve["knee"], *curve["shares"]):
        assert point["capacity_bytes"] == point["capacity_tokens"] * kv_bytes_per_token


def _browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@pytest.mark.parametrize("which", PAGES)
def test_report_opens_offline_in_headless_chromium(which: str, request: pytest.FixtureRequest,
                                                    tmp_path: Path) -> None:
    page: Path = request.getfixturevalue(which)
    done = _open_in_chromium(page, tmp_path)
    plots = page.read_text(encoding="utf-8").count('<svg class="plot"')
    assert f'data-plots-total="{plots}"' in done.stdout


def test_azure_code_page_draws_its_workload_in_headless_chromium(tmp_path: Path) -> None:
    # GIVEN the Azure 2023 code trace: arrivals and lengths only, no timing, no content
    trace = shared_trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")
    out = tmp_path / "azure.html"
    assert main(["report", str(trace), "-o", str(out)]) == ExitCode.OK
    page = out.read_text(encoding="utf-8")
    # THEN the page draws its arrivals over time, interarrival CDF and length charts
    for name in ("arrivals", "prompt_tokens", "output_tokens", "interarrival", "prompt_len",
                 "output_len", "length_cdf"):
        match = re.search(rf'<svg class="plot" data-plot="{name}".*?</svg>', page, re.S)
        assert match and 'class="mark' in match.group(0), name
    # and the browser finds marks in every one of them
    _open_in_chromium(out, tmp_path)


def _open_in_chromium(page: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Open the page offline in headless Chromium; assert its script found marks in every plot
    and nothing was logged or fetched (skips when no browser is installed)."""
    browser = _browser()
    if browser is None:
        pytest.skip("headless Chromium not installed (Debian package 'chromium'; .ci/run "
                    "installs it): the in-browser check of the HTML report did not run")
    # GIVEN a fresh profile with networking off
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-extensions", f"--user-data-dir={tmp_path / 'profile'}",
           "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=5000", "--dump-dom", page.as_uri()]
    # WHEN the page is opened
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                          env={**os.environ, "HOME": str(tmp_path)}, check=False)
    # THEN its script ran, found marks in every plot, and logged nothing to the console
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'data-plots-drawn="ok"' in done.stdout, done.stdout[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    assert "net::ERR" not in done.stderr
    return done


def test_two_run_page_puts_the_diff_on_top_and_the_runs_side_by_side(
        two_run_report: Path, timed_trace: tuple[Path, Path],
        starved_run: tuple[Path, Path]) -> None:
    page = two_run_report.read_text(encoding="utf-8")
    # The diff first: the conditions, the axis changes, the ledger of the change
    order = [page.index(f'<section id="{s}">') for s in
             ("comparison", "axis-changes", "change-ledger", "runs")]
    assert order == sorted(order)
    comparison = re.search(r'<section id="comparison">.*?</section>', page, re.S).group(0)
    assert "<strong>Comparable</strong>" in comparison
    for condition in ("request_chain", "io_distribution", "model", "hardware", "cache_warmth",
                      "success_rate"):
        assert f"<td>{condition}</td>" in comparison
    # 1,500 → 400 blocks: the KV axis regressed, and the change adds recomputed prefill
    changes = re.search(r'<section id="axis-changes">.*?</section>', page, re.S).group(0)
    kv_row = re.search(r"<tr><td>kv_memory</td>.*?</tr>", changes, re.S).group(0)
    assert '<span class="status regressed">regressed</span>' in kv_row
    ledger = re.search(r'<section id="change-ledger">.*?</section>', page, re.S).group(0)
    added = ledger[ledger.index("<h3>Added</h3>"):]
    assert "recomputed_prefill_tokens" in added
    # Below: each run's header, verdict and workload, before on the left of after
    (req, _), (starved, _) = timed_trace, starved_run
    assert f"<h2>Before: {req}</h2>" in page and f"<h2>After: {starved}</h2>" in page
    for section in ("verdict", "profile", "ledger"):
        assert page.index(f'id="before-{section}"') < page.index(f'id="after-{section}"')
    # Every plot twice, each with marks
    for name in PLOTS:
        drawn = re.findall(rf'<svg class="plot" data-plot="{name}".*?</svg>', page, re.S)
        assert len(drawn) == 2, name
        assert all('class="mark' in svg for svg in drawn), name
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert len(ids) == len(set(ids))
