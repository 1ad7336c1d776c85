"""``sweep report --html``: one self-contained page per results folder, read back as a browser
would parse it: well formed, nothing fetched from the network, one plot with every design named,
and the numbers the Parquet tables hold."""
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from sweep.analysis.html_report import study_html
from sweep.analysis.ownership import clear
from sweep.analysis.results import load_results
from sweep.cli import main
from sweep.study.metric_names import unit_of
from tests.test_vllm_bench import _copy as vllm_bench_case

VOID = {"meta", "br", "hr", "img", "input", "link"}
RUN = """name = "html-run"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3.2-1B"
[workload]
num_requests = 40
arrival_rate = 8.0
prompt_tokens = { dist = "exponential", mean = 200 }
output_tokens = { dist = "exponential", mean = 40 }
[levers]
batching = "continuous"
max_batch = [2, 32]
[run]
seeds = 1
[brief]
p95_ttft_s = { max = 0.05 }
"""
CAPACITY = """name = "html-capacity"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3.2-1B"
[workload]
num_requests = 40
prompt_tokens = { dist = "exponential", mean = 200 }
output_tokens = { dist = "exponential", mean = 40 }
[levers]
batching = "continuous"
max_batch = [8, 32]
[run]
seeds = 1
[brief]
p95_ttft_s = { max = 0.3 }
[capacity]
fleets = 2
"""


class Page(HTMLParser):
    """The parts of a page the checks read: open tags, plots, hover titles, tables, blocks."""

    def __init__(self, text: str):
        super().__init__()
        self.stack, self.svgs, self.titles, self.tables = [], 0, [], []
        self.pres, self.links, self.text = [], [], None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.links += [v for k, v in attrs if k in ("src", "href") and v]
        self.svgs += tag == "svg"
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        if tag in ("td", "th", "title", "pre"):
            self.text = ""
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-3:])
        self.stack.pop()
        if tag in ("td", "th"):
            self.tables[-1][-1].append(self.text)
        elif tag == "title" and self.stack[-1:] == ["circle"]:
            self.titles.append(self.text)
        elif tag == "pre":
            self.pres.append(self.text)

    def handle_data(self, data):
        if self.text is not None:
            self.text += data


def read(path: Path) -> Page:
    text = path.read_text()
    page = Page(text)
    assert not page.stack, page.stack  # every tag opened was closed
    assert "http://" not in text and "https://" not in text  # nothing fetched, nothing linked
    assert not page.links
    return page


def rows(table: list[list[str]]) -> list[dict]:
    return [dict(zip(table[0], row)) for row in table[1:]]


def near(text: str, value) -> bool:
    return float(text) == pytest.approx(float(value), rel=5e-4, abs=1e-12)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    (tmp / "run.toml").write_text(RUN)
    (tmp / "cap.toml").write_text(CAPACITY)
    assert main(["run", str(tmp / "run.toml"), "--out", str(tmp / "run"), "--quiet"]) == 0
    assert main(["capacity", str(tmp / "cap.toml"), "--out", str(tmp / "cap"), "--target-rate",
                 "50", "--quiet"]) == 0
    # A real vLLM run's case: the shipped benchmark example, shortened as test_vllm_bench
    # validates it (the same compiled programs, whichever file runs first).
    (tmp / "vllm").mkdir()
    case = vllm_bench_case(tmp / "vllm")
    assert main(["validate", str(case.parent), "--out", str(tmp / "val"), "--quiet"]) == 0
    return tmp


def test_a_study_page_holds_the_verdict_the_plot_and_the_commands(folders, capsys):
    assert main(["report", str(folders / "run"), "--html"]) == 0
    assert str(folders / "run" / "report.html") in capsys.readouterr().out
    page = read(folders / "run" / "report.html")
    designs = pd.read_parquet(folders / "run" / "designs.parquet").set_index("design")
    assert page.svgs == 1 and len(page.titles) == len(designs) == 2
    for d in designs.index:  # every design named on hover, with its metrics
        (title,) = [t for t in page.titles if t.startswith(f"design {d}:")]
        assert near(title.split("p95_ttft_s=")[1].split(";")[0], designs.loc[d, "p95_ttft_s"])
    passing = rows(page.tables[1])
    assert [int(r["design"]) for r in passing] == [1]  # max_batch 32 meets p95 TTFT <= 50 ms
    for r in passing + rows(page.tables[2]):
        for col in ("cost_per_mtok", "p95_ttft_s", "p95_itl_ms", "max_batch"):
            assert near(r[col], designs.loc[int(r["design"]), col]), col
    html = (folders / "run" / "report.html").read_text()
    assert "html-run" in html and "fails on queueing: 1 design" in html
    (commands,) = page.pres  # the one passing design's, as the text report wraps them
    assert designs.loc[1, "launch_vllm"].split("  # ")[0] in commands
    assert "--max-running-requests 32" in commands and "# on 1 x H100-SXM" in commands


def test_a_capacity_page_holds_the_table_and_the_cheapest_fleets(folders):
    out = folders / "elsewhere" / "capacity.html"
    assert main(["report", str(folders / "cap"), "--html", "--out", str(out)]) == 0
    page = read(out)
    cap = pd.read_parquet(folders / "cap" / "capacity.parquet").set_index("design")
    fleet = pd.read_parquet(folders / "cap" / "fleet.parquet")
    fleets, table = rows(page.tables[0]), rows(page.tables[1])
    assert [int(r["design"]) for r in fleets] == fleet["design"].tolist()
    assert all(near(r["fleet $/hour"], f) for r, f in zip(fleets, fleet["fleet_usd_per_hour"]))
    assert {int(r["design"]) for r in table} == set(cap.index)
    for r in table:
        d = int(r["design"])
        assert near(r["max rate or clients"].split()[0], cap.loc[d, "max_rate"])
        assert r["bound by"] == cap.loc[d, "binding"]
    assert len(page.pres) == len(fleet) and all("vllm serve" in p for p in page.pres)
    # The plot: a point for each design that carries load, named on hover.
    carrying = cap[cap["max_rate"] > 0]
    assert page.svgs == 1 and len(carrying) >= 1
    assert sorted(t.split(":")[0] for t in page.titles) == sorted(
        f"design {d}" for d in carrying.index)


def test_a_validation_page_holds_the_comparison_and_its_plot(folders):
    assert main(["report", str(folders / "val"), "--html"]) == 0
    page = read(folders / "val" / "report.html")
    table = pd.read_parquet(folders / "val" / "validation.parquet")
    shown = rows(page.tables[-1])
    # One plot per unit (seconds, milliseconds), never one scale for both.
    units = {unit_of(m) for m in table["metric"]}
    assert len(units) >= 2 and page.svgs == len(units)
    assert len(shown) == len(table) and len(page.titles) == len(table)
    for r, (_, t) in zip(shown, table.iterrows()):
        assert r["metric"] == t["metric"] and near(r["measured"], t["measured"])
        assert near(r["predicted"], t["predicted"])
        assert any(t["metric"] in title and t["case"] in title for title in page.titles)


def test_every_text_is_escaped(folders):
    res = load_results(folders / "run")
    text = study_html(res.designs, res.brief, res.axes, {"name": "<script>x & y</script>"})
    assert "<script>" not in text and "&lt;script&gt;x &amp; y" in text
    Page(text)


def test_a_foreign_folder_or_an_unwritable_out_is_one_line_and_writes_nothing(folders, capsys,
                                                                              tmp_path):
    cases = [([str(tmp_path), "--html"], "RESULTS"),
             ([str(folders / "run"), "--html", "--out", str(folders / "run.toml" / "r.html")],
              "--out"),
             ([str(folders / "run"), "--out", str(tmp_path / "r.html")], "--out")]
    for args, flag in cases:
        assert main(["report", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert flag in err and "\n" not in err, err
    assert not any(tmp_path.iterdir())


def test_a_forced_rerun_clears_the_report_and_keeps_the_users_files(tmp_path):
    for name in ("report.html", "runs.parquet", "notes.html"):
        (tmp_path / name).write_text("x")
    clear(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.html"]
