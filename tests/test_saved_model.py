"""A saved search carries its model: `search --model FILE --save F` then `export --from F` exports
FILE's model (the spec the search planned), a changed FILE is refused, and catalog names (and
catalog models edited with --set) keep working."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main

HF = Path(__file__).parent / "fixtures" / "hf"
# --max pp=1: the unlimited search's two plans (none pipelined) for the 40-layer file, in two thirds of the time.
JOB = ["--hw", "h100", "--gpus", "8", "--global-batch", "64", "--seq-len", "4096", "--top", "2", "--max", "pp=1"]


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture()
def forty_layers(tmp_path) -> Path:
    """Llama 3.1 8B's config.json with 40 layers, in a folder of its own (the issue's case: the
    catalog llama3.1-8b has 32)."""
    cfg = json.loads((HF / "llama3.1-8b" / "config.json").read_text())
    cfg["num_hidden_layers"] = 40
    folder = tmp_path / "llama3.1-8b"
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(cfg, indent=2))
    return path


def test_export_from_a_saved_search_exports_the_searched_file(capsys, tmp_path, forty_layers):
    saved = tmp_path / "plans.json"
    code, _, err = _run(capsys, "search", "--model", str(forty_layers), *JOB, "--save", str(saved))
    assert code == 0, err
    model = json.loads(saved.read_text())["model"]
    assert model["name"] == "llama3.1-8b" and model["spec"]["num_layers"] == 40
    assert model["file"] == str(forty_layers.resolve()) and len(model["file_sha256"]) == 64
    code, out, err = _run(capsys, "export", "--from", str(saved))
    assert code == 0, err
    assert "--num-layers 40" in out and "--num-layers 32" not in out  # not the catalog model of that name
    code, out, err = _run(capsys, "explain", "--from", str(saved), "--json")
    assert code in (0, 1), err
    assert json.loads(out)["model"]["spec_hash"] == model["spec_hash"]


def test_a_changed_model_file_is_refused(capsys, tmp_path, forty_layers):
    saved = tmp_path / "plans.json"
    assert _run(capsys, "search", "--model", str(forty_layers), *JOB, "--save", str(saved))[0] == 0
    cfg = json.loads(forty_layers.read_text())
    cfg["num_hidden_layers"] = 48
    forty_layers.write_text(json.dumps(cfg, indent=2))
    for command in ("export", "explain", "check"):
        code, out, err = _run(capsys, command, "--from", str(saved))
        assert code == 2 and out == "", command
        assert f"'{forty_layers.resolve()}', which has changed since the search" in err
        assert "ranked for the old model" in err and "Traceback" not in err
    # Naming the model on the command line is the way to export the file as it is now.
    code, out, err = _run(capsys, "export", "--from", str(saved), "--model", str(forty_layers))
    assert code == 0, err
    assert "--num-layers 48" in out


def test_a_removed_model_file_exports_the_stored_spec(capsys, tmp_path, forty_layers):
    saved = tmp_path / "plans.json"
    assert _run(capsys, "search", "--model", str(forty_layers), *JOB, "--save", str(saved))[0] == 0
    forty_layers.unlink()
    code, out, err = _run(capsys, "export", "--from", str(saved))
    assert code == 0, err
    assert "--num-layers 40" in out


def test_an_edited_stored_spec_is_refused(capsys, tmp_path):
    saved = tmp_path / "plans.json"
    assert _run(capsys, "search", "--model", "llama3.1-8b", *JOB, "--save", str(saved))[0] == 0
    data = json.loads(saved.read_text())
    assert "file" not in data["model"]  # a catalog model: no file to hash
    data["model"]["spec"]["num_layers"] = 30
    saved.write_text(json.dumps(data))
    code, _, err = _run(capsys, "export", "--from", str(saved))
    assert code == 2 and "does not match its spec_hash" in err


def test_catalog_names_and_set_overrides_keep_working(capsys, tmp_path):
    saved = tmp_path / "plans.json"
    code, _, err = _run(capsys, "search", "--model", "llama3.1-8b", "--set", "num_layers=36", *JOB, "--save", str(saved))
    assert code == 0, err
    code, out, err = _run(capsys, "export", "--from", str(saved))
    assert code == 0, err
    assert "--num-layers 36" in out  # the edited catalog model the search planned
    # An older saved search with the model's name only resolves it through the catalog.
    data = json.loads(saved.read_text())
    data["model"] = "llama3.1-8b"
    saved.write_text(json.dumps(data))
    code, out, err = _run(capsys, "export", "--from", str(saved))
    assert code == 0, err
    assert "--num-layers 32" in out
