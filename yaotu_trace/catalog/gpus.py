"""The GPU catalog and MoE routing facts: what the roofline step-time model needs per device.

The data is `resources/gpus.json` (cost-model.md §2.4: dense bf16 FLOP/s, HBM bandwidth
and memory per GPU; plus, per MoE model of the model catalog, routed experts, experts per
token, routed-expert and LM-head parameters, from the §1.2 shapes). Lookups are
case-insensitive and raise a one-line `ConfigError` naming the closest entries.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

from yaotu_trace.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One accelerator: peak dense bf16 compute, HBM bandwidth and HBM capacity (bytes)."""

    name: str
    aliases: tuple[str, ...]
    bf16_flops: float
    hbm_bytes_per_s: float
    memory_bytes: float
    status: str = ""

    def __post_init__(self) -> None:
        """A GPU with no compute, bandwidth or memory would divide by zero: refused."""
        for name in ("bf16_flops", "hbm_bytes_per_s", "memory_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not 0 < value < math.inf:
                raise ConfigError(f"GPU {self.name}: {name} {value!r} must be a finite number "
                                  "> 0; fix its entry in gpus.json")

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where a bf16 weight GEMM turns compute-bound (cost-model §2.2)."""
        return self.bf16_flops / self.hbm_bytes_per_s


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeSpec:
    """Routed experts of one MoE model: how many, how many each token uses, their parameters."""

    name: str
    experts: int
    experts_per_token: int
    routed_expert_params: int
    lm_head_params: int


@cache
def _data() -> dict[str, object]:
    text = resources.files("yaotu_trace.resources").joinpath("gpus.json").read_text("utf-8")
    data: dict[str, object] = json.loads(text)
    return data


@cache
def load_gpus() -> tuple[GpuSpec, ...]:
    """All catalog GPUs, in file order (read once per process)."""
    entries = _data()["gpus"]
    assert isinstance(entries, list)
    return tuple(GpuSpec(**{**e, "aliases": tuple(e.get("aliases", ()))}) for e in entries)


def find_gpu(name: str) -> GpuSpec:
    """Look a GPU up by name or alias, case-insensitively."""
    wanted = name.strip().lower()
    gpus = load_gpus()
    for gpu in gpus:
        if wanted in (gpu.name.lower(), *(a.lower() for a in gpu.aliases)):
            return gpu
    names = [g.name for g in gpus]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(names)}"
    raise ConfigError(f"unknown GPU {name!r}; {hint}")


def find_moe(model_name: str) -> MoeSpec | None:
    """Routed-expert facts of a catalog model, or None for a dense model."""
    moe = _data()["moe"]
    assert isinstance(moe, dict)
    for entry in moe["models"]:
        if entry["name"].lower() == model_name.lower():
            return MoeSpec(**entry)
    return None


# Network link per GPU for KV transfer between prefill and decode when none is given: one 400G
# NIC per GPU (cost-model §2.4, DGX-H100). Shared by `trace simulate` and the diagnosis ledger.
DEFAULT_LINK_GBPS = 400.0
