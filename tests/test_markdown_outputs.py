"""--markdown on search, explain and compare (validate has had it): a report to paste into a pull
request or a design doc, with the headroom column and escaped table cells."""

from __future__ import annotations

from planner.cli import main

JOB = ["--model", "llama3.1-8b", "--gpus", "8", "--global-batch", "64", "--seq-len", "4096"]
SMALL = [*JOB, "--hw", "h100"]


def _run(capsys, *args):
    code = main(list(args))
    return code, capsys.readouterr().out


def _table_rows(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("|")]


def test_search_markdown(capsys):
    code, out = _run(capsys, "search", *SMALL, "--top", "3", "--max", "pp=2", "--markdown")
    assert code == 0
    assert out.startswith("# llama3.1-8b on h100: ranked plans")
    rows = _table_rows(out)
    assert rows[0].startswith("| # | family | plan | peak / capacity (GiB) | headroom (GiB) |")
    assert len(rows) == 2 + 3
    assert "Ties: steps within " in out  # the model's resolution (planner.search.ties)
    assert "memory margin" in out and "`--memory-margin 0`" in out


def test_explain_markdown_escapes_layouts(capsys):
    code, out = _run(capsys, "explain", *SMALL, "--plan", "pp=4,vpp=2,layout=Ettt|ttttt|(tttt|)*5ttttL", "--markdown")
    assert code == 0
    assert "`pp=4,vpp=2," in out.splitlines()[0] and "|" in out.splitlines()[0]
    rows = _table_rows(out)
    header = rows[0]
    assert "| stage |" in header and "| headroom |" in header
    stage_rows = [r for r in rows if r.startswith(("| 0 ", "| 1 ", "| 2 ", "| 3 ", "| **"))]
    assert len(stage_rows) == 4
    assert all(r.count(" | ") == header.count(" | ") for r in stage_rows)
    assert "step time by cause" in out


def test_compare_markdown(capsys):
    code, out = _run(capsys, "compare", *JOB, "--hw", "h100", "--hw", "b200", "--max", "pp=2", "--markdown")
    assert code == 0
    assert out.startswith("# llama3.1-8b: h100 vs b200")
    assert "## Best plans in full" in out and _table_rows(out)
