"""gpoeo_pipeline: the offline half. DVC stages (one module each) over pure functions on dataframes."""
