"""`trace check`: thresholds, baseline comparison, a diagnosis gate over a report's metrics and
the change gate against a run before (`gate/change.py`).

The metrics are the reports of `trace analyze` (and, when a check needs an axis or the
diagnosis gate is on, `trace diagnose`) merged into one (`report_view`): a check names a metric
by its JSON path (`report_path`), walked over the section values, so the paths are the
documented report paths. A baseline is any JSON
report the tool wrote; its values are read by the same paths. See docs/ci.md.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from yaotu_trace.errors import ConfigError, ConfigFileError
from yaotu_trace.gate.fail_on import DiffGate, FailOn, Gates, ObservedGate, parse_fail_on
from yaotu_trace.gate.report_path import Resolved, close_paths, parse_path, require, resolve

# Relative tolerance of a baseline comparison unless the config says otherwise: 5 % is about the
# run-to-run spread of percentiles on traces of a few thousand requests.
DEFAULT_REL_TOL = 0.05
# Absolute tolerances by the unit a metric's name carries, so that a value near zero (no
# preemptions, sub-millisecond queues) does not fail on noise: half a percentage point for ratios
# and shares, one millisecond for durations.
DEFAULT_ABS_TOL_RATIO = 0.005
DEFAULT_ABS_TOL_SECONDS = 0.001

# Sections `trace analyze` writes; a path whose first key is none of these needs the diagnosis.
DIAGNOSE_KEYS = frozenset({"axes", "verdict", "ledger", "findings", "principal",
                           "queueing", "kv_memory", "pd_interference"})


class Op(StrEnum):
    """Comparison of a threshold check."""

    GE = ">="
    LE = "<="
    GT = ">"
    LT = "<"
    EQ = "=="
    NE = "!="


class OnMissing(StrEnum):
    """What a check does when its metric is null on this trace (not measurable)."""

    FAIL = "fail"
    SKIP = "skip"


class Better(StrEnum):
    """Which way a metric improves, for a baseline comparison."""

    HIGHER = "higher"
    LOWER = "lower"
    EITHER = "either"  # any change beyond the tolerance fails


class CheckKind(StrEnum):
    """Where a check comes from."""

    THRESHOLD = "threshold"
    BASELINE = "baseline"
    DIAGNOSIS = "diagnosis"
    CONDITION = "condition"  # a condition of the comparison with --before
    CHANGE = "change"  # an axis' change since --before
    OBSERVED = "observed"  # the engine's own cached tokens against the replay


class CheckStatus(StrEnum):
    """Outcome of one check."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    WARNED = "warned"  # worth a look, but not gated: passes


STATUS_RANK = {"ok": 0, "warning": 1, "bottleneck": 2}


@dataclass(frozen=True, slots=True, kw_only=True)
class ThresholdCheck:
    """`path op value`, e.g. `prefix_reuse.hit_ratio >= 0.4`."""

    path: str
    op: Op
    value: float | str | bool
    name: str | None = None
    on_missing: OnMissing | None = None

    @property
    def label(self) -> str:
        """The check's name in reports."""
        return self.name or f"{self.path} {self.op} {_show(self.value)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BaselineMetric:
    """One metric compared with the baseline; tolerances None take the baseline defaults."""

    path: str
    better: Better
    rel_tol: float | None = None
    abs_tol: float | None = None
    name: str | None = None
    # Paths tried when `path` is absent from a report (the same quantity under another name,
    # e.g. the diagnosis' achievable hit rate for the analyze overview's hit ratio).
    alternates: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class BaselineConfig:
    """Default tolerances, the metrics compared (empty: the headline metrics) and overrides."""

    rel_tol: float = DEFAULT_REL_TOL
    abs_tol: float | None = None  # None: by unit (DEFAULT_ABS_TOL_RATIO / _SECONDS)
    metrics: tuple[BaselineMetric, ...] = ()
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    on_missing: OnMissing | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckConfig:
    """A parsed check file (docs/ci.md)."""

    checks: tuple[ThresholdCheck, ...] = ()
    baseline: BaselineConfig = field(default_factory=BaselineConfig)
    on_missing: OnMissing = OnMissing.FAIL
    fail_on: FailOn | None = None
    fail_on_diff: frozenset[DiffGate] = frozenset()
    fail_on_observed: ObservedGate | None = None
    path: str | None = None


# The headline metrics a baseline is compared on when the config names none: success rate,
# reuse, queueing, first-token and inter-token latency, preemption. Metrics the trace cannot
# measure are skipped. The success rate comes first: latencies of the successful requests
# alone would let a run that lost requests pass as a faster one.
HEADLINE_METRICS: tuple[BaselineMetric, ...] = (
    BaselineMetric(path="success.success_rate", better=Better.HIGHER),
    BaselineMetric(path="prefix_reuse.hit_ratio", better=Better.HIGHER,
                   alternates=("prefix_reuse.achievable_hit_rate",)),
    BaselineMetric(path="queueing.queue_time_s.p50", better=Better.LOWER),
    BaselineMetric(path="queueing.queue_time_s.p99", better=Better.LOWER),
    BaselineMetric(path="queueing.ttft_s.p50", better=Better.LOWER),
    BaselineMetric(path="queueing.ttft_s.p99", better=Better.LOWER),
    BaselineMetric(path="pd_interference.tbt_s.p50", better=Better.LOWER),
    BaselineMetric(path="pd_interference.tbt_s.p99", better=Better.LOWER),
    BaselineMetric(path="kv_memory.preempted_request_share", better=Better.LOWER),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """One check's outcome with the numbers behind it."""

    name: str
    kind: CheckKind
    status: CheckStatus
    path: str | None
    resolved_path: str | None
    value: float | str | bool | None
    op: str | None = None
    threshold: float | str | bool | None = None
    baseline: float | str | bool | None = None
    tolerance: float | None = None
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckSection:
    """Every check in config order (thresholds, baseline, diagnosis, then the conditions and
    axis changes against --before) and the tally; a warned check passes."""

    status: CheckStatus
    passed: int
    failed: int
    skipped: int
    warned: int = 0
    config_path: str | None
    baseline_path: str | None
    before_path: str | None = None
    fail_on: FailOn | None
    fail_on_diff: tuple[DiffGate, ...] = ()
    # `observed-shortfall`'s margins when that gate is on (its check is among the results).
    fail_on_observed: ObservedGate | None = None
    results: tuple[CheckResult, ...]


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


# -- config -----------------------------------------------------------------------------------


def _enum(cls: type[StrEnum], value: Any, where: str) -> Any:
    try:
        return cls(str(value).lower() if cls is not Op else str(value).strip())
    except ValueError:
        choices = ", ".join(repr(m.value) for m in cls)
        raise ConfigFileError(f"{where}: {value!r} is not one of {choices}") from None


def _tol(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise ConfigFileError(f"{where}: tolerance must be a non-negative number, got {value!r}")
    return float(value)


def _text(value: Any, key: str, where: str, example: str) -> str:
    """A string value of the check file, else a ConfigFileError naming the key and the type."""
    if not isinstance(value, str):
        raise ConfigFileError(f"{where}: '{key}' is {value!r} ({type(value).__name__}), "
                              f"expected text; e.g. {key} = \"{example}\"")
    return value


def _metric_path(value: Any, where: str) -> str:
    """A metric path of the check file, checked for its syntax (a bad one names the file)."""
    path = _text(value, "path", where, "prefix_reuse.hit_ratio")
    try:
        parse_path(path)
    except ConfigError as exc:
        raise ConfigFileError(f"{where}: {exc}") from exc
    return path


def _known(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigFileError(f"{where}: unknown key {unknown[0]!r}; allowed: "
                          f"{', '.join(sorted(allowed))}")


def parse_config(data: Mapping[str, Any], path: str = "check config") -> CheckConfig:
    """Validate a check file's TOML table; every problem is a ConfigFileError naming where."""
    _known(data, {"check", "baseline", "on_missing", "fail_on"}, path)
    on_missing = _enum(OnMissing, data.get("on_missing", "fail"), f"{path}: on_missing")
    gates = _fail_on(data.get("fail_on"), path)
    raw_checks = data.get("check", [])
    if not isinstance(raw_checks, list):
        raise ConfigFileError(f"{path}: 'check' must be an array of tables ([[check]])")
    checks = []
    for i, entry in enumerate(raw_checks, start=1):
        where = f"{path}: check #{i}"
        if not isinstance(entry, dict):
            raise ConfigFileError(f"{where}: must be a table with path, op and value")
        _known(entry, {"path", "op", "value", "name", "on_missing"}, where)
        for key in ("path", "op", "value"):
            if key not in entry:
                raise ConfigFileError(f"{where}: missing '{key}' (e.g. path = \"prefix_reuse."
                                  "hit_ratio\", op = \">=\", value = 0.4)")
        path_text = _metric_path(entry["path"], where)
        op = _enum(Op, entry["op"], f"{where}: op")
        value = entry["value"]
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigFileError(f"{where}: value must be finite")
        if not isinstance(value, int | float | str | bool):
            raise ConfigFileError(f"{where}: value must be a number, string or boolean")
        if op not in (Op.EQ, Op.NE) and (isinstance(value, bool) or
                                          not isinstance(value, int | float)):
            raise ConfigFileError(f"{where}: op {op} needs a number, got {value!r}")
        checks.append(ThresholdCheck(
            path=path_text, op=op,
            value=float(value) if isinstance(value, int) and not isinstance(value, bool)
            else value,
            name=None if "name" not in entry else _text(entry["name"], "name", where,
                                                         "hit ratio"),
            on_missing=None if "on_missing" not in entry else _enum(
                OnMissing, entry["on_missing"], f"{where}: on_missing"),
        ))
    return CheckConfig(checks=tuple(checks), baseline=_parse_baseline(data.get("baseline", {}),
                                                                       path),
                       on_missing=on_missing, fail_on=gates.level, fail_on_diff=gates.diff,
                       fail_on_observed=gates.observed, path=path)


def _fail_on(value: Any, path: str) -> Gates:
    """`fail_on = "bottleneck"`, `"regressed,not-comparable"`, `"observed-shortfall:2:10"` or a
    list of such words."""
    if value is None:
        return Gates()
    if not isinstance(value, str) and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ConfigFileError(f"{path}: fail_on is {value!r}, expected text or a list of text; "
                              'e.g. fail_on = ["regressed", "not-comparable"]')
    try:
        gates = parse_fail_on(value, where=f"{path}: fail_on")
    except ConfigError as exc:
        raise ConfigFileError(str(exc)) from None
    return gates


def _parse_baseline(table: Any, path: str) -> BaselineConfig:
    where = f"{path}: [baseline]"
    if not isinstance(table, dict):
        raise ConfigFileError(f"{where} must be a table")
    _known(table, {"rel_tol", "abs_tol", "metric", "override", "on_missing"}, where)
    metrics = []
    entries = table.get("metric", [])
    if not isinstance(entries, list):
        raise ConfigFileError(f"{where}: 'metric' must be an array of tables "
                              "([[baseline.metric]])")
    for i, entry in enumerate(entries, start=1):
        w = f"{where} metric #{i}"
        if not isinstance(entry, dict) or "path" not in entry:
            raise ConfigFileError(f"{w}: must be a table with a path")
        _known(entry, {"path", "better", "rel_tol", "abs_tol", "name"}, w)
        metrics.append(BaselineMetric(
            path=_metric_path(entry["path"], w),
            better=_enum(Better, entry.get("better", "either"), f"{w}: better"),
            rel_tol=None if "rel_tol" not in entry else _tol(entry["rel_tol"], f"{w}: rel_tol"),
            abs_tol=None if "abs_tol" not in entry else _tol(entry["abs_tol"], f"{w}: abs_tol"),
            name=None if "name" not in entry else _text(entry["name"], "name", w, "hit ratio"),
        ))
    overrides = table.get("override", {})
    if not isinstance(overrides, dict):
        raise ConfigFileError(f"{where}: 'override' must be a table of tables keyed by path")
    for key, entry in overrides.items():
        w = f"{where} override {key!r}"
        _metric_path(key, w)
        if not isinstance(entry, dict):
            raise ConfigFileError(f"{w}: must be a table (rel_tol, abs_tol, better)")
        _known(entry, {"rel_tol", "abs_tol", "better"}, w)
        for tol in ("rel_tol", "abs_tol"):
            if tol in entry:
                _tol(entry[tol], f"{w}: {tol}")
        if "better" in entry:
            _enum(Better, entry["better"], f"{w}: better")
    return BaselineConfig(
        rel_tol=_tol(table.get("rel_tol", DEFAULT_REL_TOL), f"{where}: rel_tol"),
        abs_tol=None if "abs_tol" not in table else _tol(table["abs_tol"], f"{where}: abs_tol"),
        metrics=tuple(metrics),
        overrides={str(k): dict(v) for k, v in overrides.items()},
        on_missing=None if "on_missing" not in table else _enum(
            OnMissing, table["on_missing"], f"{where}: on_missing"),
    )


def load_config(path: Path) -> CheckConfig:
    """Read a check file (TOML); an unreadable or invalid file is a ConfigFileError naming it."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigFileError(f"{path}: cannot read the check file ({err.strerror or err})"
                              ) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigFileError(f"{path}: not valid TOML ({err})") from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not a UTF-8 text file; --config takes a TOML file of "
                              "[[check]] tables (docs/ci.md)") from None
    return parse_config(data, str(path))


def load_baseline(path: Path) -> dict[str, Any]:
    """Read a JSON report written by the tool; anything else is a ConfigFileError naming it."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigFileError(f"{path}: cannot read the baseline ({err.strerror or err})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigFileError(f"{path}: the baseline is not a JSON report ({err}); write one with "
                          "`trace diagnose --format json -o baseline.json`") from None
    if not isinstance(doc, dict) or "schema_version" not in doc or "command" not in doc:
        raise ConfigFileError(f"{path}: not a yaotu-trace JSON report (no schema_version/command); "
                          "write one with `trace diagnose --format json -o baseline.json`")
    from yaotu_trace.data.report import SCHEMA_VERSION

    version = doc["schema_version"]
    # NOTE: a version bump means a change of meaning or shape (docs/json.md), so the same path
    # in another version need not be the same metric: comparing it would gate on a guess.
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise ConfigFileError(
            f"{path}: schema_version {json.dumps(version)} is not one this tool reads (it reads "
            f"{SCHEMA_VERSION}); write the baseline again with this version: `trace diagnose "
            "--format json -o baseline.json`"
        )
    return doc


# -- evaluation -------------------------------------------------------------------------------


def needs_diagnosis(config: CheckConfig, baseline: bool) -> bool:
    """Whether any check reads an axis, the verdict or the ledger (or the gate is on)."""
    if config.fail_on is not None:
        return True
    paths = [c.path for c in config.checks]
    if baseline:
        paths += [m.path for m in (config.baseline.metrics or HEADLINE_METRICS)]
    heads = [(p, str(parse_path(p)[0])) for p in paths]
    return any(head in DIAGNOSE_KEYS or (head == "prefix_reuse" and not _analyze_path(p))
               for p, head in heads)


def _analyze_path(path: str) -> bool:
    """`prefix_reuse.<x>` fields that `trace analyze`'s overview carries."""
    head = parse_path(path)
    return len(head) > 1 and str(head[1]) in {
        "available", "reason", "preset", "block_size_tokens", "hit_ratio",
        "saved_prefill_tokens", "remaining_prefill_tokens", "distinct_blocks",
        "cacheable_blocks", "knee", "shares", "full_reuse", "hit_rates", "notes"}


def _compare(actual: Any, op: Op, target: Any) -> bool | None:
    """The comparison, or None when the types cannot be compared with `op`."""
    if op in (Op.EQ, Op.NE):
        if isinstance(actual, int | float) and not isinstance(actual, bool) and \
                isinstance(target, int | float) and not isinstance(target, bool):
            equal = math.isclose(float(actual), float(target), rel_tol=1e-9, abs_tol=1e-12)
        else:
            equal = actual == target
        return equal if op is Op.EQ else not equal
    if isinstance(actual, bool) or not isinstance(actual, int | float):
        return None
    a, t = float(actual), float(target)
    match op:
        case Op.GE:
            return a >= t
        case Op.LE:
            return a <= t
        case Op.GT:
            return a > t
        case Op.LT:
            return a < t
    return None


def _missing_message(res: Resolved) -> str:
    where = res.null_at or res.resolved_path or res.path
    if where.endswith("]"):
        return f"not available on this trace ({where} is absent)"
    if where != (res.resolved_path or res.path):
        return f"not available on this trace ({where} is null)"
    return "not available on this trace (null)"


def _threshold(doc: Mapping[str, Any], check: ThresholdCheck, default: OnMissing,
               config_path: str) -> CheckResult:
    try:
        res = require(doc, check.path, where="the report")
    except ConfigError as exc:  # the path comes from the check file: a bad file, exit 3
        raise ConfigFileError(f"{config_path}: check {check.label!r}: {exc}; fix its path") \
            from exc
    base: dict[str, Any] = {"name": check.label, "kind": CheckKind.THRESHOLD, "path": check.path,
            "resolved_path": res.resolved_path, "op": str(check.op), "threshold": check.value}
    if res.value is None:
        policy = check.on_missing or default
        status = CheckStatus.FAILED if policy is OnMissing.FAIL else CheckStatus.SKIPPED
        return CheckResult(status=status, value=None, message=_missing_message(res), **base)
    ok = _compare(res.value, check.op, check.value)
    if ok is None:
        return CheckResult(status=CheckStatus.FAILED, value=_scalar(res.value),
                           message=f"value {_show(_scalar(res.value))} is not a number; "
                           f"{check.op} needs one", **base)
    msg = "ok" if ok else f"{_show(_scalar(res.value))} is not {check.op} {_show(check.value)}"
    return CheckResult(status=CheckStatus.PASSED if ok else CheckStatus.FAILED,
                       value=_scalar(res.value), message=msg, **base)


def _scalar(value: Any) -> float | str | bool | None:
    """A check reports scalars only; objects are summarised by their JSON text."""
    if value is None or isinstance(value, bool | int | float | str):
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value
    return json.dumps(value, sort_keys=True)[:200]


def _default_abs_tol(path: str) -> float:
    leaf = path.rsplit(".", 1)[-1]
    parts = path.split(".")
    if any(p.endswith("_s") for p in parts) or leaf.endswith("_s"):
        return DEFAULT_ABS_TOL_SECONDS
    if any(w in leaf for w in ("ratio", "share", "fraction", "rate")):
        return DEFAULT_ABS_TOL_RATIO
    return 0.0


def baseline_values(doc: Mapping[str, Any]) -> Callable[[str], Resolved]:
    """Resolver over a baseline report; a `trace check` report answers from its results."""
    if doc.get("command") == "check" and isinstance(doc.get("checks"), dict):
        values = {r.get("path"): r.get("value") for r in doc["checks"].get("results", [])
                  if isinstance(r, dict) and r.get("path") is not None
                  and r.get("kind") != CheckKind.DIAGNOSIS}

        def from_results(path: str) -> Resolved:
            if path in values:
                return Resolved(path=path, found=True, value=values[path], resolved_path=path)
            return resolve(doc, path)

        return from_results
    return lambda path: resolve(doc, path)


def _baseline(doc: Mapping[str, Any], base: Callable[[str], Resolved], metric: BaselineMetric,
              cfg: BaselineConfig, default_missing: OnMissing, headline: bool,
              baseline_command: str) -> CheckResult:
    override = cfg.overrides.get(metric.path, {})
    better = Better(override.get("better", metric.better))
    rel = float(override.get("rel_tol", metric.rel_tol if metric.rel_tol is not None
                             else cfg.rel_tol))
    abs_default = cfg.abs_tol if cfg.abs_tol is not None else _default_abs_tol(metric.path)
    abs_ = float(override.get("abs_tol", metric.abs_tol if metric.abs_tol is not None
                              else abs_default))
    name = metric.name or f"{metric.path} vs baseline"
    # Headline metrics the trace cannot measure are skipped; explicit ones follow on_missing.
    policy = OnMissing.SKIP if headline else (cfg.on_missing or default_missing)
    cur = _first_found([resolve(doc, p) for p in (metric.path, *metric.alternates)])
    if not cur.found and not headline:
        cur = require(doc, metric.path)
    prev = _first_found([base(p) for p in (metric.path, *metric.alternates)])
    common: dict[str, Any] = {"name": name, "kind": CheckKind.BASELINE, "path": metric.path,
              "resolved_path": cur.resolved_path, "op": better.value}
    missing = None
    if not cur.found or cur.value is None:
        missing = "this trace: " + (_missing_message(cur) if cur.found else "not reported")
    elif not prev.found:
        missing = f"the baseline ({baseline_command} report) has no {metric.path}"
    elif prev.value is None:
        missing = "the baseline: " + _missing_message(prev)
    if missing is not None:
        status = CheckStatus.FAILED if policy is OnMissing.FAIL else CheckStatus.SKIPPED
        return CheckResult(status=status, value=_scalar(cur.value),
                           baseline=_scalar(prev.value), message=f"not compared: {missing}",
                           **common)
    a, b = cur.value, prev.value
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float) \
            or not isinstance(b, int | float):
        ok = a == b
        return CheckResult(status=CheckStatus.PASSED if ok else CheckStatus.FAILED,
                           value=_scalar(a), baseline=_scalar(b),
                           message="unchanged" if ok else f"changed from {_show(b)} to {_show(a)}",
                           **common)
    allowed = max(abs_, rel * abs(float(b)))
    delta = float(a) - float(b)
    match better:
        case Better.HIGHER:
            ok = delta >= -allowed
        case Better.LOWER:
            ok = delta <= allowed
        case _:
            ok = abs(delta) <= allowed
    change = f"{delta / abs(float(b)):+.1%}" if b else f"{delta:+.4g}"
    change += f" ({_show(float(b))} → {_show(float(a))}, tolerance ±{allowed:.3g})"
    word = "ok" if ok else "regression"
    if better is Better.EITHER and not ok:
        word = "changed"
    return CheckResult(status=CheckStatus.PASSED if ok else CheckStatus.FAILED,
                       value=float(a), baseline=float(b), tolerance=allowed,
                       message=f"{word}: {change}", **common)


def _first_found(results: list[Resolved]) -> Resolved:
    """The first resolution that exists, else the first (unknown) one."""
    return next((r for r in results if r.found), results[0])


def _axes(doc: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, axis) pairs from the mapping form or the list form of `axes`."""
    from yaotu_trace.data.report import to_builtins

    axes = to_builtins(doc.get("axes"))
    if isinstance(axes, dict):
        return [(str(k), v) for k, v in axes.items() if isinstance(v, dict)]
    if isinstance(axes, list):
        out: list[tuple[str, Mapping[str, Any]]] = []
        for item in axes:
            if isinstance(item, dict):
                name = item.get("name") or item.get("axis")
                if isinstance(name, str):
                    out.append((name, item))
        return out
    return []


def _diagnosis(doc: Mapping[str, Any], fail_on: FailOn) -> list[CheckResult]:
    results = []
    limit = STATUS_RANK[fail_on.value]
    for name, axis in _axes(doc):
        status = axis.get("status")
        common: dict[str, Any] = {"name": f"diagnosis: {name}", "kind": CheckKind.DIAGNOSIS,
                  "path": f"axes.{name}.status", "resolved_path": f"axes.{name}.status",
                  "op": "<", "threshold": fail_on.value, "value": status}
        if status not in STATUS_RANK:
            missing = axis.get("missing") or []
            why = f"; missing {missing[0]}" if missing else ""
            results.append(CheckResult(status=CheckStatus.SKIPPED,
                                       message=f"{status}: not judged on this trace{why}",
                                       **common))
            continue
        ok = STATUS_RANK[str(status)] < limit
        cause = axis.get("cause")
        msg = str(status) + (f": {cause}" if cause else "")
        results.append(CheckResult(status=CheckStatus.PASSED if ok else CheckStatus.FAILED,
                                   message=msg if ok else f"{msg} (fails at {fail_on.value})",
                                   **common))
    return results


def run_checks(
    doc: Mapping[str, Any],
    config: CheckConfig,
    baseline: Mapping[str, Any] | None = None,
    *,
    baseline_path: str | None = None,
    gates: Gates | None = None,
    changes: Sequence[CheckResult] = (),
    before_path: str | None = None,
) -> CheckSection:
    """Evaluate every check on the merged report `doc`, then append `changes` (the results of
    `gate.change.change_results` against `before_path`); unknown paths raise ConfigError.
    `gates` is `--fail-on` (its level replaces the check file's; its change gates are the
    ones `changes` were judged under)."""
    source = config.path or "the check config"
    results = [_threshold(doc, c, config.on_missing, source) for c in config.checks]
    if baseline is not None:
        base = baseline_values(baseline)
        command = str(baseline.get("command", "unknown"))
        headline = not config.baseline.metrics
        results.extend(_baseline(doc, base, metric, config.baseline, config.on_missing,
                                 headline, command)
                       for metric in config.baseline.metrics or HEADLINE_METRICS)
    gates = gates or Gates()
    gate = gates.level or config.fail_on
    if gate is not None:
        if not _axes(doc):
            raise ConfigError("--fail-on needs the diagnosis axes, but the report has none")
        results.extend(_diagnosis(doc, gate))
    results.extend(changes)
    counts = {s: sum(r.status is s for r in results) for s in CheckStatus}
    return CheckSection(
        status=CheckStatus.FAILED if counts[CheckStatus.FAILED] else CheckStatus.PASSED,
        passed=counts[CheckStatus.PASSED],
        failed=counts[CheckStatus.FAILED],
        skipped=counts[CheckStatus.SKIPPED],
        warned=counts[CheckStatus.WARNED],
        config_path=config.path,
        baseline_path=baseline_path,
        before_path=before_path,
        fail_on=gate,
        fail_on_diff=tuple(sorted(gates.diff)) if before_path is not None else (),
        fail_on_observed=gates.observed,
        results=tuple(results),
    )


def wants_diagnosis(doc: Mapping[str, Any], config: CheckConfig, has_baseline: bool,
                    fail_on: FailOn | None = None) -> bool:
    """Whether the checks need the diagnosis on top of the analysis `doc`: a check reads an
    axis, the verdict or the ledger, the gate is on, or a path is not in `doc`."""
    paths = [c.path for c in config.checks] + [m.path for m in config.baseline.metrics]
    return (needs_diagnosis(config, has_baseline) or (fail_on or config.fail_on) is not None
            or any(not resolve(doc, p).found for p in paths))


def report_view(report: Any, *, under: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The metrics of `report` by their JSON paths: the envelope of `Report.to_dict` and the
    section values themselves, unconverted (`report_path.view` walks them).

    With `under`, the keys `under` already has are kept: a diagnosis adds its axes, verdict,
    ledger and findings to the analysis without replacing the analysis' input or config.
    """
    from yaotu_trace._version import __version__
    from yaotu_trace.data.report import SCHEMA_VERSION

    doc: dict[str, Any] = dict(under or {})
    own: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "yaotu-trace", "version": __version__},
        "command": report.command,
        "input": report.input,
        "config": report.config,
        **report.sections,
    }
    for key, value in own.items():
        doc.setdefault(key, value)
    return doc


__all__ = [
    "HEADLINE_METRICS",
    "BaselineConfig",
    "BaselineMetric",
    "Better",
    "CheckConfig",
    "CheckKind",
    "CheckResult",
    "CheckSection",
    "CheckStatus",
    "DiffGate",
    "FailOn",
    "OnMissing",
    "Op",
    "ThresholdCheck",
    "close_paths",
    "load_baseline",
    "load_config",
    "needs_diagnosis",
    "parse_config",
    "report_view",
    "run_checks",
    "wants_diagnosis",
]
