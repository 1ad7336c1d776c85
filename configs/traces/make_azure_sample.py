"""Writes azure_sample.csv: a small synthetic trace in the Azure LLM inference trace format.

The columns and time format are those of the public Azure traces (TIMESTAMP as
``2023-11-16 18:15:46.6805900``, ContextTokens, GeneratedTokens); the values are synthetic:
300 requests with bursty arrivals (Gamma gaps, mean 0.2 s, coefficient of variation 2) and
lognormal lengths (prompts median ~900 tokens, outputs median ~150 tokens). Deterministic:
``python configs/traces/make_azure_sample.py`` rewrites the same file.
"""
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

ROWS = 300
rng = np.random.default_rng(20231116)
cv = 2.0
gaps = rng.gamma(1 / cv**2, 0.2 * cv**2, ROWS)
start = datetime(2023, 11, 16, 18, 15, 46, 680590)
context = np.clip(np.round(rng.lognormal(np.log(900), 0.9, ROWS)), 1, 7000).astype(int)
generated = np.clip(np.round(rng.lognormal(np.log(150), 0.8, ROWS)), 1, 1000).astype(int)
lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
t = 0.0
for gap, c, g in zip(gaps, context, generated):
    t += gap
    stamp = start + timedelta(microseconds=round(t * 1e6))
    lines.append(f"{stamp:%Y-%m-%d %H:%M:%S.%f}0,{c},{g}")
Path(__file__).with_name("azure_sample.csv").write_text("\n".join(lines) + "\n")
