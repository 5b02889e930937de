"""The README stays true: its figures are the ones `planner results` generated (results/readme-figures.md,
rendered from the committed reports), and every link in it points inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

from planner.report import readme_figures as rf
from planner.report.results import FIGURES, report_names

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def test_readme_figures_equal_the_generated_file_and_the_committed_reports():
    block = rf.block_in(README.read_text())
    assert block is not None, "README.md lacks the figures markers"
    generated = (REPO / "results" / rf.FILE).read_text()
    assert block == generated, (
        "README.md's figures differ from results/readme-figures.md: paste that file between the markers "
        "(run `planner results` first if the reports changed)")
    # ... and the file is what the committed reports give (planner results --check regenerates it).
    assert generated == rf.render_from_folder(REPO / "results")
    assert FIGURES in report_names()


def test_the_figures_change_when_a_report_changes():
    """The block is rendered from the reports' numbers, not a frozen text."""
    import json

    validation = json.loads((REPO / "results" / rf.VALIDATION_JSON).read_text())
    outs = {n: json.loads((REPO / "results" / f"{n}.json").read_text()) for n in rf.HEADLINE_REPORTS}
    before = rf.render(validation, outs)
    validation["summary"]["validation"]["all"]["median_abs_error"] = 0.5
    assert rf.render(validation, outs) != before and "50.0 %" in rf.render(validation, outs)


def test_every_link_points_inside_the_repository():
    text = README.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links
    for link in links:
        assert not re.match(r"[a-z]+://", link), f"README links outside the repository: {link}"
        target = (REPO / link.split("#")[0]).resolve()
        assert target.is_relative_to(REPO), f"README links outside the repository: {link}"
        assert target.exists(), f"README links to a missing file: {link}"


def test_docs_links_resolve():
    for doc in sorted((REPO / "docs").glob("*.md")):
        for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
            if re.match(r"[a-z]+://", link):
                continue
            target = (doc.parent / link).resolve()
            assert target.is_relative_to(REPO) and target.exists(), f"{doc.name}: broken link {link}"


def test_readme_is_short():
    """A user reads it in five minutes: the details live in docs/."""
    assert len(README.read_text().splitlines()) <= 150
