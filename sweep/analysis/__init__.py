"""From rows to answers: metrics, Parquet results and tables, frontiers and reports."""
