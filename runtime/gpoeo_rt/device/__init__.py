"""Device layer: one GPU interface with an NVML backend and a simulated GPU, chosen in one place."""
