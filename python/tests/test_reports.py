# Reports and validation from Python: the same Markdown/HTML as `trainplan report` and the same
# JSON as `trainplan validate --json`.
import json

import pytest
import trainplan

if not hasattr(trainplan, "report"):
    pytest.skip("built without reports/ and calibration/", allow_module_level=True)

SEARCH = dict(model="gpt2-124m", tokens="1e9", instances="p3.8xlarge,g5.12xlarge", max_gpus=16, spot_runs=100, top=3)
SEARCH_ARGS = ["--model", "gpt2-124m", "--tokens", "1e9", "--instances", "p3.8xlarge,g5.12xlarge", "--max-gpus", "16",
               "--spot-runs", "100", "--top", "3"]


def test_search_report_files_equal_cli(cli, tmp_path):
    cli.run("report", *SEARCH_ARGS, "-o", "report")
    out = tmp_path / "py"
    out.mkdir()
    res = trainplan.report(out / "report", **SEARCH)
    assert res["files"] == [str(out / "report.md"), str(out / "report.html")]
    for ext in ["md", "html"]:
        assert (out / f"report.{ext}").read_text() == (cli.cwd / f"report.{ext}").read_text()
    assert res["markdown"] == (cli.cwd / "report.md").read_text()
    assert res["model"] == "gpt2-124m"
    assert res["best"]["cluster"]["instance_type"] in ("p3.8xlarge", "g5.12xlarge")


def test_plan_report_markdown_equals_cli(cli, tmp_path):
    best = trainplan.plan(model="gpt2-124m", tokens="1e9", instances="p3.8xlarge", max_gpus=8)["best"]
    path = tmp_path / "best.json"
    path.write_text(json.dumps(best))
    expected = cli.run("report", "--plan", path, "--format", "md", "-o", "-", "--spot-runs", "100").stdout
    got = trainplan.report(plan=str(path), format="md", spot_runs=100)
    assert got["markdown"] == expected
    assert "html" not in got and got["files"] == []


def test_report_needs_a_search_or_a_plan():
    with pytest.raises(trainplan.Error) as e:
        trainplan.report(model="gpt2-124m")
    assert "model= and tokens=" in e.value.message


def test_validate_equals_cli(cli, source_dir):
    mini = source_dir / "tests" / "calibration" / "data" / "published-mini.json"
    cli.run("validate", mini, "--json", "v.json")
    expected = json.loads((cli.cwd / "v.json").read_text())
    got = trainplan.validate(mini)
    assert got == expected
    from_dict = trainplan.validate(json.loads(mini.read_text()))
    assert from_dict["points"] == got["points"]
