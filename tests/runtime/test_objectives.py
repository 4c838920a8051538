import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpoeo_rt.search.objectives import Objective, objective_values, pick_config


def test_energy_pick_respects_the_slowdown_bound() -> None:
    time_ratio = np.array([1.0, 1.03, 1.08, 1.2])
    energy_ratio = np.array([1.0, 0.9, 0.8, 0.7])
    assert pick_config(Objective.ENERGY, time_ratio, energy_ratio, 0.05) == 1
    assert pick_config(Objective.ENERGY, time_ratio, energy_ratio, 0.10) == 2


def test_energy_pick_falls_back_to_the_fastest_config_when_none_is_feasible() -> None:
    time_ratio = np.array([1.3, 1.2, 1.5])
    energy_ratio = np.array([0.5, 0.9, 0.4])
    assert pick_config(Objective.ENERGY, time_ratio, energy_ratio, 0.05) == 1


def test_ed2p_and_edp_weigh_time() -> None:
    time_ratio = np.array([1.0, 1.5])
    energy_ratio = np.array([1.0, 0.6])
    assert pick_config(Objective.EDP, time_ratio, energy_ratio, 0.0) == 1  # 0.9 < 1
    assert pick_config(Objective.ED2P, time_ratio, energy_ratio, 0.0) == 0  # 1.35 > 1
    assert objective_values(Objective.ED2P, time_ratio, energy_ratio)[1] == pytest.approx(1.35)


def test_mismatched_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="equal-length"):
        pick_config(Objective.ENERGY, np.array([1.0, 1.1]), np.array([1.0]), 0.05)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.5, 3.0), st.floats(0.2, 2.0)), min_size=1, max_size=40),
    st.floats(0.0, 0.3),
)
def test_energy_pick_is_the_cheapest_feasible_config(configs: list[tuple[float, float]], bound: float) -> None:
    time_ratio = np.array([c[0] for c in configs])
    energy_ratio = np.array([c[1] for c in configs])
    chosen = pick_config(Objective.ENERGY, time_ratio, energy_ratio, bound)
    feasible = time_ratio <= 1.0 + bound
    if feasible.any():
        assert feasible[chosen]
        assert energy_ratio[chosen] == energy_ratio[feasible].min()
    else:
        assert time_ratio[chosen] == time_ratio.min()
