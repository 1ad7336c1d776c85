"""Block-hash traces: the shipped Mooncake sample, hash_ids in CSV, Parquet and JSONL, the rows'
ids following them when sorted, and one-line refusals of bad hash lists and bad JSONL lines."""
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweep.study import trace as trace_mod
from sweep.study.trace import load_trace

SAMPLE = Path(__file__).parents[1] / "configs" / "traces" / "mooncake_conversation_sample.jsonl"


def raw_sample() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines()]


def test_the_shipped_mooncake_sample_loads():
    raw = raw_sample()
    t = load_trace(SAMPLE)
    assert len(t.arrival) == len(raw) == 300
    stamps = np.array([r["timestamp"] for r in raw], float)
    assert (np.diff(stamps) >= 0).all()  # already in order: row r is line r + 1
    np.testing.assert_allclose(t.arrival, (stamps - stamps[0]) / 1000.0)
    np.testing.assert_array_equal(t.prompt, [r["input_length"] for r in raw])
    np.testing.assert_array_equal(t.output, [r["output_length"] for r in raw])
    ids = t.hashes(len(raw))
    for r, row in enumerate(raw):
        assert len(row["hash_ids"]) == math.ceil(row["input_length"] / 512)
        np.testing.assert_array_equal(ids[r], row["hash_ids"])
    assert t.hash_flat.dtype == t.hash_offsets.dtype == np.int64
    assert len(t.hash_offsets) == 301 and t.hash_offsets[-1] == len(t.hash_flat)
    assert not t.hash_flat.flags.writeable  # shared by every point
    assert [len(a) for a in t.hashes(303)[300:]] == [0, 0, 0]
    seen, reused = set(), 0  # conversations resend their context: blocks beyond 0 recur
    for row in raw:
        reused += sum(h in seen for h in row["hash_ids"][1:])
        seen.update(row["hash_ids"])
    assert reused > 100


def check_rows(t, arrival, ids):
    np.testing.assert_allclose(t.arrival, arrival)
    got = t.hashes(len(ids))
    assert [a.tolist() for a in got] == ids


def test_csv_and_parquet_hash_ids_round_trip_and_follow_sorted_rows(tmp_path):
    df = pd.DataFrame({"arrival_s": [2.0, 0.5, 1.0, 0.5], "prompt_tokens": [900, 1000, 10, 5],
                       "output_tokens": [1, 2, 3, 4],
                       "hash_ids": ["[0, 14, 15]", "0 1", "[]", "[7]"]})
    sorted_ids = [[0, 1], [7], [], [0, 14, 15]]  # stable: the two 0.5s keep their order
    df.to_csv(tmp_path / "t.csv", index=False)
    t = load_trace(tmp_path / "t.csv")
    check_rows(t, [0.0, 0.0, 0.5, 1.5], sorted_ids)
    np.testing.assert_array_equal(t.prompt, [1000, 5, 10, 900])
    df.to_parquet(tmp_path / "s.parquet")  # the same strings in Parquet
    check_rows(load_trace(tmp_path / "s.parquet"), t.arrival, sorted_ids)
    df["hash_ids"] = [[0, 14, 15], [0, 1], [], [7]]  # a list column
    df.to_parquet(tmp_path / "l.parquet")
    lt = load_trace(tmp_path / "l.parquet")
    check_rows(lt, t.arrival, sorted_ids)
    np.testing.assert_array_equal(lt.hash_offsets, [0, 2, 3, 3, 6])
    lines = [json.dumps({"timestamp": 1000 * a, "input_length": p, "output_length": o,
                         "hash_ids": h}) for a, p, o, h in
             zip([2.0, 0.5, 1.0, 0.5], df.prompt_tokens, df.output_tokens, df.hash_ids)]
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n\n")  # trailing blank lines pass
    check_rows(load_trace(tmp_path / "t.jsonl"), t.arrival, sorted_ids)


def test_no_hash_column_gives_none(tmp_path):
    pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [5, 6],
                  "output_tokens": [1, 2]}).to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "t.jsonl").write_text('{"timestamp": 5, "input_length": 3, "output_length": 0}\n'
                                      '{"timestamp": 0, "input_length": 4, "output_length": 1,'
                                      ' "note": "ignored"}\n')
    for name in ("t.csv", "t.jsonl"):
        t = load_trace(tmp_path / name)
        assert t.hash_flat is None and t.hash_offsets is None and t.hashes(3) is None
    np.testing.assert_allclose(t.arrival, [0.0, 0.005])  # milliseconds, sorted
    np.testing.assert_array_equal(t.output, [1, 1])


def refusal(path) -> str:
    with pytest.raises(ValueError) as info:
        load_trace(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"workload.trace: {path}: "), msg
    return msg


@pytest.mark.parametrize("cell, needle", [
    ("[0, -1]", "row 1 is '[0, -1]'"),
    ("0 1.5", "row 1 is '0 1.5'"),
    ("abc", "row 1 is 'abc'"),
    ("[1,,2]", "row 1 is '[1,,2]'"),
    (f"[{2**31}]", f"row 1 is '[{2**31}]'"),
    ("", "row 1 is 'nan'"),
    (" ".join(["3"] * (2**20 + 1)), "row 1 has 1048577 ids; allowed: at most 1048576 a row"),
])
def test_bad_hash_lists_in_csv_are_refused_naming_the_row(tmp_path, cell, needle):
    p = tmp_path / "t.csv"
    p.write_text(f'arrival_s,prompt_tokens,output_tokens,hash_ids\n0,1,1,"[0]"\n1,1,1,"{cell}"\n')
    msg = refusal(p)
    assert f"column hash_ids: {needle}" in msg and "allowed: " in msg


@pytest.mark.parametrize("ids, needle", [
    ("[0, -3]", "row 1 (line 2) is '[0, -3]'"),
    ("[0, 1.5]", "row 1 (line 2) is '[0, 1.5]'"),
    ("[true]", "row 1 (line 2) is '[True]'"),
    ('"0 1 x"', "row 1 (line 2) is '0 1 x'"),
    ("null", "row 1 (line 2) is 'None'"),
    ("7", "row 1 (line 2) is '7'"),
    (json.dumps([0] * (2**20 + 1)), "row 1 (line 2) has 1048577 ids"),
])
def test_bad_hash_lists_in_jsonl_are_refused_naming_the_row(tmp_path, ids, needle):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]}\n'
                 f'{{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": {ids}}}\n')
    assert f"column hash_ids: {needle}" in refusal(p)


def test_bad_parquet_hash_lists_and_the_total_bound(tmp_path, monkeypatch):
    df = pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [1, 1], "output_tokens": [1, 1],
                       "hash_ids": [[0, 1], [2, None]]})  # a missing id makes a float column
    df.to_parquet(tmp_path / "f.parquet")
    assert "column hash_ids: row 0 is '[0. 1.]'" in refusal(tmp_path / "f.parquet")
    df["hash_ids"] = [[0, 1], None]
    df.to_parquet(tmp_path / "n.parquet")
    assert "column hash_ids: row 1 is 'None'" in refusal(tmp_path / "n.parquet")
    df["hash_ids"] = [[0, 1], [2, 3, 4]]
    df.to_parquet(tmp_path / "ok.parquet")
    monkeypatch.setattr(trace_mod, "MAX_HASHES", 4)
    assert ("column hash_ids: row 1 brings the ids to 5; allowed: at most 4 in all"
            in refusal(tmp_path / "ok.parquet"))


@pytest.mark.parametrize("second, needle", [
    ("[1, 2]", "line 2: an array, not a JSON object"),
    ('{"timestamp": 1,', "line 2: not JSON ("),
    ("", "line 2: blank"),
    ('{"timestamp": 1, "input_length": 1, "output_length": 1}', "line 2: lacks hash_ids, unlike "
                                                               "line 1"),
    ('{"timestamp": "soon", "input_length": 1, "output_length": 1, "hash_ids": []}',
     "column timestamp: row 1 is 'soon'; allowed: numbers of milliseconds"),
])
def test_bad_jsonl_lines_are_refused_naming_the_line(tmp_path, second, needle):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]}\n'
                 f"{second}\n"
                 '{"timestamp": 2, "input_length": 1, "output_length": 1, "hash_ids": [0]}\n')
    assert needle in refusal(p)


def test_empty_and_unknown_files(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n")
    assert "0 rows; allowed: 1 to" in refusal(tmp_path / "e.jsonl")
    (tmp_path / "t.json").write_text("{}")
    assert "unknown file type '.json'; allowed: .csv, .parquet, .jsonl" in refusal(
        tmp_path / "t.json")
