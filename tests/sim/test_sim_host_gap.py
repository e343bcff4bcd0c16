"""Host work that does not overlap the GPU: the instance idles between steps (`host_gap_s`)."""

from __future__ import annotations

import numpy as np
import pytest

from yaotu_trace.errors import ConfigError
from yaotu_trace.sim import RequestArrays, SimConfig, StepCost, simulate_requests


def run(host_gap_s: float):
    reqs = RequestArrays(arrival_s=np.array([0.0, 0.005]), prompt_tokens=np.array([10, 6]),
                         output_tokens=np.array([3, 2]))
    cost = StepCost.fixed(0.01, 0.001, host_gap_s=host_gap_s)
    return simulate_requests(reqs, SimConfig(kv_blocks=100, block_size_tokens=4, max_num_seqs=8,
                                    max_batched_tokens=16, step_cost=cost))


def test_host_gap_idles_the_gpu_between_steps_and_delays_tokens():
    # GIVEN the two-request schedule of test_sim_schedules, with 5 ms of host work per step
    r = run(0.005)
    # THEN every step starts 5 ms after the previous one ended; step times are unchanged
    np.testing.assert_allclose(r.step_start_s, [0.0, 0.025, 0.046])
    np.testing.assert_allclose(r.step_end_s, [0.02, 0.041, 0.056])
    np.testing.assert_allclose(r.step_start_s[1:] - r.step_end_s[:-1], [0.005, 0.005])
    # AND a token is out once the host has processed its step
    np.testing.assert_allclose(r.first_token_s, [0.025, 0.046])
    np.testing.assert_allclose(r.finish_s, [0.061, 0.061])
    np.testing.assert_allclose(r.busy_s, [0.046])  # the GPU works as long as without gaps
    assert r.host_overhead_s == pytest.approx(3 * 0.005)


def test_no_host_gap_is_the_default_schedule():
    r = run(0.0)
    np.testing.assert_allclose(r.step_start_s, [0.0, 0.02, 0.036])


def test_negative_host_gap_is_refused():
    with pytest.raises(ConfigError):
        StepCost.fixed(0.01, host_gap_s=-0.001)
