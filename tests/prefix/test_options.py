"""The replay options: every rule they override is a `ReplayRules` field of the same name, each
is laid over the preset as given, and a capacity is counted in blocks as `--capacity` says."""

from __future__ import annotations

from dataclasses import fields

import pytest

from yaotu_trace.errors import ConfigError
from yaotu_trace.prefix.options import RULE_FIELDS, ReplayOptions
from yaotu_trace.prefix.rules import ReplayRules, Scope, rules_for

# `ReplayRules` fields no option overrides: the capacity is given as text (`capacity`) and
# counted in blocks of the effective block size; the affinity threshold is sgl-router's fixed
# default.
NOT_OPTIONS = {"capacity_blocks", "affinity_threshold"}


def test_every_rule_is_an_option_of_the_same_name() -> None:
    rules = {f.name for f in fields(ReplayRules)}
    options = {f.name for f in fields(ReplayOptions)}
    assert set(RULE_FIELDS) == rules - NOT_OPTIONS
    assert set(RULE_FIELDS) <= options


def test_rule_overrides_hold_only_what_is_given() -> None:
    assert ReplayOptions().rule_overrides() == {}
    given = ReplayOptions(block_size_tokens=64, last_token_rule=False, capacity="1Mtok",
                          capacity_per_tenant=True, model="Llama-3.1-8B")
    assert given.rule_overrides() == {"block_size_tokens": 64, "last_token_rule": False,
                                      "capacity_per_tenant": True}


def test_a_route_implies_one_cache_per_instance() -> None:
    routed = ReplayOptions(route="round-robin", instances=4)
    assert routed.rule_overrides()["scope"] is Scope.INSTANCE
    rules = rules_for("vllm", **routed.rule_overrides())
    assert (rules.scope, rules.instances) == (Scope.INSTANCE, 4)
    # A scope given is kept, so that the rules can refuse a route on one global cache.
    with pytest.raises(ConfigError, match="add --scope instance"):
        rules_for("vllm", **ReplayOptions(route="random", scope="global").rule_overrides())


def test_a_capacity_in_bytes_takes_the_model_at_its_kv_dtype() -> None:
    bf16 = ReplayOptions(model="Llama-3.1-8B")
    fp8 = ReplayOptions(model="Llama-3.1-8B", kv_dtype="fp8")
    assert bf16.capacity_blocks("1GiB", 16) == 2**30 // 131_072 // 16
    assert fp8.capacity_blocks("1GiB", 16) == 2 * bf16.capacity_blocks("1GiB", 16)
    assert bf16.capacity_blocks("20000", 16) == 20_000
    assert ReplayOptions().capacity_blocks(None, 16) is None
    with pytest.raises(ConfigError, match="pass only one of them"):
        ReplayOptions(model="Llama-3.1-8B", kv_dtype="fp8", kv_bytes_per_token=10).kv_bytes()
