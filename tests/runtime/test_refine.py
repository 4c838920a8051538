import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpoeo_rt.search.objectives import Objective, pick_config
from gpoeo_rt.search.refine import RefineSearch

SM = np.arange(600.0, 1501.0, 100.0)  # 10 configs, reference = 1500 (last)
MEM = np.full(SM.size, 877.0)


def truth(share: float) -> tuple[np.ndarray, np.ndarray]:
    ratio = SM / SM[-1]
    time_ratio = share / ratio + (1 - share)
    power_ratio = 0.3 + 0.7 * (share * ratio**2 + (1 - share) * ratio)
    return time_ratio, time_ratio * power_ratio


def run(search: RefineSearch, time_ratio: np.ndarray, energy_ratio: np.ndarray) -> int:
    search.record(SM.size - 1, 1.0, 1.0)  # the reference, measured while profiling
    probes = 0
    while (index := search.next_probe()) is not None:
        search.record(index, float(time_ratio[index]), float(energy_ratio[index]))
        probes += 1
    return probes


def test_perfect_predictions_converge_on_the_oracle_with_few_probes() -> None:
    time_ratio, energy_ratio = truth(0.3)
    search = RefineSearch(SM, MEM, time_ratio, energy_ratio, Objective.ENERGY, 0.05)
    probes = run(search, time_ratio, energy_ratio)
    assert search.best() == pick_config(Objective.ENERGY, time_ratio, energy_ratio, 0.05)
    assert probes <= 3


def test_a_pessimistic_model_is_corrected_by_measurements() -> None:
    time_ratio, energy_ratio = truth(0.2)  # memory-bound: low clocks cost little time
    wrong_time, wrong_energy = truth(0.9)  # the model thinks it is compute-bound
    prediction_only = pick_config(Objective.ENERGY, wrong_time, wrong_energy, 0.05)
    oracle = pick_config(Objective.ENERGY, time_ratio, energy_ratio, 0.05)
    assert SM[prediction_only] > SM[oracle]  # the model alone would leave energy on the table
    search = RefineSearch(SM, MEM, wrong_time, wrong_energy, Objective.ENERGY, 0.05)
    run(search, time_ratio, energy_ratio)
    assert energy_ratio[search.best()] < energy_ratio[prediction_only]
    assert time_ratio[search.best()] <= 1.05


def test_an_optimistic_model_never_ends_on_a_violating_config() -> None:
    time_ratio, energy_ratio = truth(0.9)
    wrong_time, wrong_energy = truth(0.1)  # the model thinks every clock is nearly free
    search = RefineSearch(SM, MEM, wrong_time, wrong_energy, Objective.ENERGY, 0.05)
    run(search, time_ratio, energy_ratio)
    assert time_ratio[search.best()] <= 1.05


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="equal-length"):
        RefineSearch(SM, MEM[:-1], SM, SM, Objective.ENERGY, 0.05)
    search = RefineSearch(SM, MEM, *truth(0.5), Objective.ENERGY, 0.05)
    with pytest.raises(ValueError, match="no config has been measured"):
        search.best()
    with pytest.raises(ValueError, match="positive and finite"):
        search.record(0, float("nan"), 1.0)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    true_share=st.floats(0.05, 0.95),
    model_share=st.floats(0.05, 0.95),
    bound=st.sampled_from([0.02, 0.05, 0.1]),
    max_probes=st.integers(1, 8),
    objective=st.sampled_from(list(Objective)),
)
def test_search_properties(
    true_share: float, model_share: float, bound: float, max_probes: int, objective: Objective
) -> None:
    time_ratio, energy_ratio = truth(true_share)
    search = RefineSearch(SM, MEM, *truth(model_share), objective, bound, max_probes=max_probes)
    probes = run(search, time_ratio, energy_ratio)
    best = search.best()
    assert probes <= max_probes
    assert best in search.measured()  # only measured configs are ever chosen
    if objective is Objective.ENERGY:
        assert time_ratio[best] <= 1.0 + bound  # the reference is always a feasible fallback
        assert energy_ratio[best] <= 1.0
