"""The counter-feature vocabulary shared by the offline pipeline and the runtime.

Every source of counters maps onto these names, as fractions in [0, 1]:
- DCGM profiling fields 1002-1008 (SMACT, SMOCC, TENSO, DRAMA, FP64A, FP32A, FP16A), already fractions;
- NVML GPM metrics on Hopper and newer (percent 0..100, divided by 100);
- older nvprof metrics where a source has close equivalents (see the pipeline's source parsers).
A source that lacks a counter leaves it NaN; models are trained to accept NaN (XGBoost's missing value).
"""

from typing import Final

FEATURE_NAMES: Final[tuple[str, ...]] = (
    "feat_sm_active",
    "feat_sm_occupancy",
    "feat_dram_active",
    "feat_fp16_active",
    "feat_fp32_active",
    "feat_fp64_active",
    "feat_tensor_active",
)

# DCGM profiling field id -> feature name (DCGM_FI_PROF_*; the NV-DVFS-Benchmark column names in brackets).
DCGM_FIELD_TO_FEATURE: Final[dict[int, str]] = {
    1002: "feat_sm_active",  # SMACT
    1003: "feat_sm_occupancy",  # SMOCC
    1004: "feat_tensor_active",  # TENSO
    1005: "feat_dram_active",  # DRAMA
    1006: "feat_fp64_active",  # FP64A
    1007: "feat_fp32_active",  # FP32A
    1008: "feat_fp16_active",  # FP16A
}

# NVML GPM metric name (pynvml constant, without the NVML_GPM_METRIC_ prefix) -> feature name. GPM reports percent.
GPM_METRIC_TO_FEATURE: Final[dict[str, str]] = {
    "SM_UTIL": "feat_sm_active",
    "SM_OCCUPANCY": "feat_sm_occupancy",
    "DRAM_BW_UTIL": "feat_dram_active",
    "FP16_UTIL": "feat_fp16_active",
    "FP32_UTIL": "feat_fp32_active",
    "FP64_UTIL": "feat_fp64_active",
    "ANY_TENSOR_UTIL": "feat_tensor_active",
}
