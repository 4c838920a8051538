"""Sampling layer: turns a device into time series (buffered power, energy, counters) over simulated or real time."""
