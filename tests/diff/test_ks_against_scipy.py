"""The two-sample Kolmogorov–Smirnov test of `trace diff` against SciPy's own numbers on a
public trace. SciPy 1.17.1 `scipy.stats.ks_2samp(x, y, method="asymp")` on the Azure 2023
code trace's ContextTokens, even rows against odd rows, gave D = 0.02070862063733786 and
p = 0.29666272332296373; code against conversation gave D = 0.3460237727362306, p = 0.0.
D is the same statistic; the p-value differs in the third digit because ours takes Numerical
Recipes' small-sample correction of the effective size (λ = (√nₑ + 0.12 + 0.11/√nₑ)·D).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import SHARED_TRACES

from yaotu_trace.diff.ks import ks_test

AZURE = SHARED_TRACES / "azure_llm_2023"


def _context_tokens(name: str) -> np.ndarray:
    path = AZURE / name
    if not path.exists():
        pytest.skip(f"{path} is not here")
    return pd.read_csv(path)["ContextTokens"].to_numpy(dtype=np.float64)


def test_halves_of_one_trace_match_scipy() -> None:
    code = _context_tokens("AzureLLMInferenceTrace_code.csv")
    result = ks_test(code[::2], code[1::2])
    assert result.statistic == pytest.approx(0.02070862063733786, abs=1e-12)
    assert result.p_value == pytest.approx(0.29666272332296373, abs=0.002)


def test_two_traces_match_scipy() -> None:
    code = _context_tokens("AzureLLMInferenceTrace_code.csv")
    conv = _context_tokens("AzureLLMInferenceTrace_conv.csv")
    result = ks_test(code, conv)
    assert result.statistic == pytest.approx(0.3460237727362306, abs=1e-12)
    assert result.p_value < 1e-100
