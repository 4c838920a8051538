"""Replay benchmark: gpoeo-rt against the oracle and the anchors' strategies on simulated jobs driven by measured
sweeps (`gpoeo-rt bench`). `sweeps` reads the table, `policies` holds the strategies, `harness` the simulated job,
its truth, the oracle and the honest models (shared with `bench.simulate`), `runner` runs and scores them,
`report` summarises and plots."""
