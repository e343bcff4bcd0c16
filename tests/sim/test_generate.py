"""Synthetic traces: determinism, schema validity, and the property each scenario claims."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from yaotu_trace.cli import main
from yaotu_trace.data.run_id import read_run_id
from yaotu_trace.data.schema import CANONICAL_COLUMNS, list_arrays
from yaotu_trace.errors import ConfigError, ExitCode
from yaotu_trace.ingest import read_trace
from yaotu_trace.sim.generate import DEFAULTS, SCENARIOS, GenerateOptions, generate_requests
from yaotu_trace.sim.workloads import WorkloadKind

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
BLOCK_TOKENS = 16


def small(scenario: WorkloadKind, *, seed: int = 0, requests: int = 200,
          **kw: object) -> pd.DataFrame:
    return generate_requests(GenerateOptions(scenario=scenario, seed=seed, requests=requests, **kw))


def token_lists(df: pd.DataFrame, column: str = "prompt_tokens") -> list[np.ndarray]:
    offsets, values = list_arrays(df[column])
    return [values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def interarrival_cv(df: pd.DataFrame) -> float:
    gaps = np.diff(df["arrival_s"].to_numpy())
    return float(gaps.std() / gaps.mean())


def prefix_hit_ratio(df: pd.DataFrame, *, by_tenant: bool) -> float:
    """Token-weighted block-prefix reuse against every earlier request, unlimited cache."""
    seen: set[int] = set()
    hit = total = 0
    for tenant, prompt in zip(df["tenant"], token_lists(df), strict=True):
        chain = hash(tenant) if by_tenant else 0
        matched = True
        for b in range(len(prompt) // BLOCK_TOKENS):
            chain = hash((chain, prompt[b * BLOCK_TOKENS : (b + 1) * BLOCK_TOKENS].tobytes()))
            matched = matched and chain in seen
            hit += BLOCK_TOKENS if matched else 0
            seen.add(chain)
        total += len(prompt)
    return hit / total


def anywhere_reuse_ratio(df: pd.DataFrame) -> float:
    """Share of 16-token windows already seen, at any position, in an earlier request."""
    powers = np.array([pow(1_000_003, j, 2**64) for j in range(BLOCK_TOKENS)], dtype=np.uint64)
    seen: set[int] = set()
    reused = total = 0
    for prompt in token_lists(df):
        total += len(prompt)
        if len(prompt) < BLOCK_TOKENS:
            continue
        windows = (sliding_window_view(prompt.astype(np.uint64), BLOCK_TOKENS) * powers).sum(1)
        keys = windows.tolist()
        reused += sum(1 for key in keys if key in seen)
        seen.update(keys)
    return reused / total


# --- registry -----------------------------------------------------------------------------


def test_scenarios_every_member_described_and_has_defaults() -> None:
    assert set(SCENARIOS) == set(WorkloadKind) == set(DEFAULTS)
    assert all(SCENARIOS[s] and "\n" not in SCENARIOS[s] for s in WorkloadKind)


def test_generate_help_lists_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--help"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert all(re.search(rf"^\s+{re.escape(s.value)}\s", out, re.MULTILINE) for s in WorkloadKind)


# --- determinism --------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", list(WorkloadKind))
def test_generate_same_seed_same_table(scenario: WorkloadKind) -> None:
    pd.testing.assert_frame_equal(small(scenario, seed=7), small(scenario, seed=7))


@pytest.mark.parametrize("scenario", list(WorkloadKind))
def test_generate_other_seed_other_table(scenario: WorkloadKind) -> None:
    first, second = small(scenario, seed=1), small(scenario, seed=2)
    assert not first["arrival_s"].equals(second["arrival_s"])
    assert first["prompt_tokens"].iloc[-1] != second["prompt_tokens"].iloc[-1]


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".csv"])
def test_generate_cli_file_byte_identical_when_run_twice(
    suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"]
    for path in paths:
        args = ["generate", "chat", "--requests", "150", "--seed", "3", "--out", str(path)]
        assert main(args) == ExitCode.OK
    assert paths[0].read_bytes() == paths[1].read_bytes()
    _, err = capsys.readouterr()
    assert err.count("generated 150 chat requests (seed 3)") == 2


# --- schema -------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", list(WorkloadKind))
def test_generate_output_loads_and_validates(scenario: WorkloadKind, tmp_path: Path) -> None:
    # GIVEN a generated table written as Parquet
    table = small(scenario, requests=120)
    path = tmp_path / "t.parquet"
    from yaotu_trace.data.canonical import write_trace

    write_trace(table, path)
    # WHEN it is read back through the normal input path
    trace = read_trace(path)
    # THEN it validates without notes and keeps every row, in arrival order
    requests = trace.requests
    assert len(requests) == 120
    assert trace.notes == ()
    assert set(requests.columns) <= set(CANONICAL_COLUMNS)
    assert requests["request_id"].is_unique
    assert requests["arrival_s"].iloc[0] == 0.0
    assert requests["arrival_s"].is_monotonic_increasing
    lengths = [len(p) for p in token_lists(requests)]
    assert lengths == requests["prompt_len"].tolist()
    assert all(0 <= t < 128_256 for p in token_lists(requests) for t in (p.min(), p.max()))
    assert (requests["output_len"] >= 1).all()
    if "output_tokens" in requests.columns:
        outputs = [len(o) for o in token_lists(requests, "output_tokens")]
        assert outputs == requests["output_len"].tolist()


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_generate_text_formats_load_to_the_parquet_table(
    suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("t.parquet", f"t{suffix}"):
        main(["generate", "multi-tenant", "-n", "40", "--out", str(tmp_path / name)])
    from_parquet = read_trace(tmp_path / "t.parquet").requests
    from_text = read_trace(tmp_path / f"t{suffix}").requests
    pd.testing.assert_frame_equal(from_parquet, from_text, check_dtype=False)


@pytest.mark.parametrize("requests", [1, 7, 333])
@pytest.mark.parametrize("scenario", list(WorkloadKind))
def test_generate_request_count_exact(scenario: WorkloadKind, requests: int) -> None:
    assert len(small(scenario, requests=requests)) == requests


def test_generate_tenants_option_sets_the_tenant_count() -> None:
    table = small(WorkloadKind.MULTI_TENANT, requests=600, tenants=6)
    assert table["tenant"].nunique() == 6


@pytest.mark.parametrize(
    ("option", "value"), [("requests", 0), ("rate_per_s", 0.0), ("tenants", 0), ("seed", -1)]
)
def test_generate_invalid_option_raises_config_error(option: str, value: float) -> None:
    options = {"requests": 10, option: value}
    with pytest.raises(ConfigError):
        generate_requests(GenerateOptions(scenario=WorkloadKind.CHAT, **options))  # type: ignore[arg-type]


@pytest.mark.parametrize("count", ["1000000000000", str(2**63), "99999999999999999999999"])
def test_generate_absurd_request_count_is_refused_up_front(
    count: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a count no machine holds (1e12) or beyond int64 (which used to loop without end)
    out = tmp_path / "t.parquet"
    # WHEN generating it
    code = main(["generate", "chat", "-n", count, "--out", str(out)])
    # THEN a usage error names the option and the value, and nothing is written
    stdout, err = capsys.readouterr()
    assert code == ExitCode.USAGE
    assert stdout == ""
    assert err.startswith(f"error: --requests {count}: ") and err.count("\n") == 1
    assert not out.exists()


def test_generate_request_count_against_memory_names_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from yaotu_trace.sim import generate as gen

    monkeypatch.setattr("yaotu_trace.prefix.memory.available_bytes", lambda: 10**9)
    fits = (10**9 - 4 * gen.BYTES_PER_TENANT) // gen.BYTES_PER_REQUEST[WorkloadKind.CHAT]
    with pytest.raises(ConfigError) as info:
        GenerateOptions(scenario=WorkloadKind.CHAT, requests=fits + 1).resolved()
    message = str(info.value)
    assert message.startswith(f"--requests {fits + 1}: a chat trace is built in memory, about "
                              "72.0 kB a request")
    assert "and 1.0 GB is available" in message
    assert message.endswith(f"give at most {fits:,} requests")
    assert GenerateOptions(scenario=WorkloadKind.CHAT, requests=fits).resolved().requests == fits


def test_generate_tenant_count_against_memory_names_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from yaotu_trace.sim import generate as gen

    monkeypatch.setattr("yaotu_trace.prefix.memory.available_bytes", lambda: 10**9)
    with pytest.raises(ConfigError, match=r"^--tenants 1000000000: .* give at most "
                                          rf"{10**9 // gen.BYTES_PER_TENANT:,} tenants$"):
        GenerateOptions(scenario=WorkloadKind.RAG, requests=10, tenants=10**9).resolved()


def test_generate_hard_cap_where_memory_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    from yaotu_trace.sim import generate as gen

    monkeypatch.setattr("yaotu_trace.prefix.memory.available_bytes", lambda: None)
    with pytest.raises(ConfigError, match=rf"at most {gen.MAX_REQUESTS:,} requests a trace"):
        GenerateOptions(scenario=WorkloadKind.CHAT, requests=gen.MAX_REQUESTS + 1).resolved()
    assert GenerateOptions(scenario=WorkloadKind.CHAT, requests=gen.MAX_REQUESTS).resolved()


def test_generate_memory_estimate_covers_every_scenario() -> None:
    from yaotu_trace.sim import generate as gen

    assert set(gen.BYTES_PER_REQUEST) == set(WorkloadKind)


def test_generate_cli_bad_extension_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "chat", "--out", str(tmp_path / "t.txt")]) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: --out") and ".parquet, .jsonl or .csv" in err


def test_generate_cli_rate_zero_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "chat", "--rate", "0", "--out", "x.csv"]) == ExitCode.USAGE
    assert "--rate" in capsys.readouterr().err


def test_generate_cli_dash_writes_jsonl_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "bursty", "-n", "5", "--out", "-"]) == ExitCode.OK
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 5 and all(line.startswith('{"request_id":"req-') for line in lines)
    assert err.startswith("generated 5 bursty requests") and err.endswith("-> stdout\n")


# --- scenario properties ------------------------------------------------------------------


@pytest.mark.parametrize("scenario", [WorkloadKind.CHAT, WorkloadKind.AGENTIC])
def test_generate_session_turn_extends_previous_prompt_and_output(scenario: WorkloadKind) -> None:
    table = small(scenario, requests=300)
    prompts, outputs = token_lists(table), token_lists(table, "output_tokens")
    checked = 0
    for _, rows in table.groupby("session_id", sort=False):
        positions = rows.index.to_list()  # arrival order within the session
        for before, after in itertools.pairwise(positions):
            head = np.concatenate([prompts[before], outputs[before]])
            assert len(prompts[after]) > len(head)
            assert np.array_equal(prompts[after][: len(head)], head)
            checked += 1
    assert checked > 100


def test_generate_chat_system_prompts_are_per_tenant() -> None:
    table = small(WorkloadKind.CHAT, requests=500)
    heads = pd.Series([p[:64].tobytes() for p in token_lists(table)])
    tenants_per_head = table["tenant"].groupby(heads.values).nunique()
    assert (tenants_per_head == 1).all()
    # Few system prompts per tenant: most requests start like many others.
    assert heads.nunique() <= 2 * table["tenant"].nunique()


def test_generate_multi_tenant_shares_system_prompts_across_tenants() -> None:
    # GIVEN a multi-tenant trace
    table = small(WorkloadKind.MULTI_TENANT, requests=500)
    heads = pd.Series([p[:128].tobytes() for p in token_lists(table)])
    tenants_per_head = table["tenant"].groupby(heads.values).nunique()
    # THEN some system prompts are used by several tenants and some by one tenant only
    assert (tenants_per_head >= 2).sum() >= 2
    assert (tenants_per_head == 1).sum() >= 2
    # AND isolating tenants visibly costs prefix reuse
    shared = prefix_hit_ratio(table, by_tenant=False)
    isolated = prefix_hit_ratio(table, by_tenant=True)
    assert shared - isolated > 0.05


def test_generate_rag_reuse_is_mostly_not_a_prefix() -> None:
    table = small(WorkloadKind.RAG, requests=300)
    prefix = prefix_hit_ratio(table, by_tenant=True)
    anywhere = anywhere_reuse_ratio(table)
    assert anywhere > 0.8
    assert anywhere > 2 * prefix


@pytest.mark.parametrize("scenario", [WorkloadKind.CHAT, WorkloadKind.MULTI_TENANT,
                                      WorkloadKind.BURSTY])
def test_generate_prefix_scenarios_reuse_is_a_prefix(scenario: WorkloadKind) -> None:
    table = small(scenario, requests=300)
    prefix = prefix_hit_ratio(table, by_tenant=False)
    assert prefix > 0.5
    assert prefix >= 0.95 * anywhere_reuse_ratio(table)


@pytest.mark.parametrize("seed", range(5))
def test_generate_bursty_interarrival_cv_above_two(seed: int) -> None:
    table = generate_requests(GenerateOptions(scenario=WorkloadKind.BURSTY, seed=seed))
    assert 3.0 < interarrival_cv(table) < 12.0


def test_generate_bursty_rate_is_exact() -> None:
    table = small(WorkloadKind.BURSTY, requests=500, rate_per_s=2.0)
    assert table["arrival_s"].iloc[-1] == pytest.approx(499 / 2.0, abs=1e-5)


@pytest.mark.parametrize(
    "scenario",
    [WorkloadKind.CHAT, WorkloadKind.MULTI_TENANT, WorkloadKind.RAG, WorkloadKind.LONG_PREFILL],
)
def test_generate_poisson_scenarios_cv_near_one_and_rate_near_requested(
    scenario: WorkloadKind,
) -> None:
    table = small(scenario, requests=2000, rate_per_s=4.0)
    assert 0.85 < interarrival_cv(table) < 1.15
    assert 1999 / table["arrival_s"].iloc[-1] == pytest.approx(4.0, rel=0.12)


def test_generate_bursty_lengths_look_like_code_completion() -> None:
    table = small(WorkloadKind.BURSTY, requests=1000)
    assert 1000 < table["prompt_len"].median() < 2500
    assert table["prompt_len"].max() <= 7437
    assert table["output_len"].median() < 30


def test_generate_agentic_contexts_grow_long() -> None:
    table = small(WorkloadKind.AGENTIC, requests=300)
    assert table["prompt_len"].median() > 10_000
    assert table["prompt_len"].max() > 30_000
    assert table.groupby("session_id")["prompt_len"].is_monotonic_increasing.all()


def test_generate_long_prefill_mixes_long_prompts_and_long_decodes() -> None:
    table = small(WorkloadKind.LONG_PREFILL, requests=500)
    long_prompt = table["prompt_len"] > 4000
    assert 0.1 < long_prompt.mean() < 0.4
    assert table.loc[long_prompt, "prompt_len"].max() > 30_000
    assert table.loc[~long_prompt, "output_len"].median() > 300
    assert table.loc[long_prompt, "output_len"].median() < 200
    # Some long documents are asked about more than once (the same first 2,000 tokens).
    prompts = token_lists(table)
    heads = [prompts[i][:2000].tobytes() for i in np.flatnonzero(long_prompt.to_numpy())]
    assert len(set(heads)) < len(heads)


# --- sample traces ------------------------------------------------------------------------


def readme_commands() -> list[list[str]]:
    text = (SAMPLES / "README.md").read_text(encoding="utf-8")
    return [shlex.split(line) for line in re.findall(r"^trace generate .+$", text, re.MULTILINE)]


def written(command: list[str]) -> dict[str, str]:
    """Output option → path of one README command (`--out`, and `--steps-out` when given)."""
    return {opt: command[command.index(opt) + 1] for opt in ("--out", "--steps-out")
            if opt in command}


def test_sample_traces_readme_covers_every_sample_file() -> None:
    outputs = {Path(p).name for cmd in readme_commands() for p in written(cmd).values()}
    on_disk = {p.name for p in SAMPLES.iterdir() if p.suffix in (".parquet", ".jsonl", ".csv")}
    assert outputs == on_disk
    assert "chat.parquet" in outputs
    assert all((SAMPLES / name).stat().st_size < 2_000_000 for name in outputs)


@pytest.mark.parametrize("command", readme_commands(), ids=lambda c: c[c.index("--out") + 1])
def test_sample_traces_regenerate_identically(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the command the README gives for a sample file (and its step log, if any)
    args = list(command[1:])
    fresh: dict[str, Path] = {}
    for option, path in written(command).items():
        at = args.index(option) + 1
        fresh[path] = tmp_path / Path(path).name
        args[at] = str(fresh[path])
    # WHEN it is run with the outputs redirected
    assert main(args) == ExitCode.OK
    # THEN the committed files hold the same tables, stamped with the same run (if any)
    for option, path in written(command).items():
        assert read_run_id(fresh[path]) == read_run_id(REPO / path)
        if option == "--steps-out":
            pd.testing.assert_frame_equal(pd.read_parquet(fresh[path]),
                                          pd.read_parquet(REPO / path))
        else:
            pd.testing.assert_frame_equal(read_trace(fresh[path]).requests,
                                          read_trace(REPO / path).requests)
