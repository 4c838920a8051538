"""Detection layer: pure numeric period and phase-change detection over power-sample arrays."""
