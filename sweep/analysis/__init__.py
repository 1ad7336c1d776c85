"""From rows to answers: metrics, Parquet results, frontiers, reports, capacity, calibration and validation."""
