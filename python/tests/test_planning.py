# Plan search, check, simulate and job from Python: the same numbers as the CLI for the same
# input, the same error text for bad input, and the GIL released during a long search.
import json
import threading
import time

import pytest
import trainplan

SEARCH = dict(model="gpt2-124m", tokens="1e9", instances="p3.8xlarge,g5.12xlarge", max_gpus=16)
SEARCH_ARGS = ["--model", "gpt2-124m", "--tokens", "1e9", "--instances", "p3.8xlarge,g5.12xlarge", "--max-gpus", "16"]


@pytest.fixture(scope="module")
def searched(cli_path, tmp_path_factory):
    """The search from Python and from the CLI (best plan file and every candidate)."""
    from conftest import Cli
    tmp = tmp_path_factory.mktemp("plan")
    cli = Cli(cli_path, tmp)
    cli.run("plan", *SEARCH_ARGS, "-o", "best.json", "--json", "all.json")
    return {
        "py": trainplan.plan(**SEARCH, all_ranked=True),
        "cli_best": json.loads((tmp / "best.json").read_text()),
        "cli_all": json.loads((tmp / "all.json").read_text()),
        "dir": tmp,
    }


def test_search_equals_cli(searched):
    py = searched["py"]
    assert py["best"] == searched["cli_best"]
    assert py["ranked"] == searched["cli_all"]
    assert [c["rank"] for c in py["ranked"]] == list(range(1, len(py["ranked"]) + 1))
    assert [i for i, c in enumerate(py["ranked"]) if c["pareto"]] == py["pareto"]
    assert py["cancelled"] is False
    assert [s["name"] for s in py["stages"]][0] == "enumerate"


def test_top_limits_the_ranked_rows(searched):
    res = trainplan.plan(**SEARCH, top=3)
    assert res["ranked"] == searched["py"]["ranked"][:3]


def test_numbers_and_lists_work_as_option_values(searched):
    res = trainplan.plan(model="gpt2-124m", tokens=1e9, instances=["p3.8xlarge", "g5.12xlarge"], max_gpus=16, all_ranked=True)
    assert res["ranked"] == searched["py"]["ranked"]


def test_objective_with_deadline_matches_cli(cli):
    args = ["--model", "gpt2-355m", "--tokens", "2e9", "--instances", "p3.8xlarge,p3.16xlarge", "--max-gpus", "32",
            "--objective", "cost-under-deadline", "--deadline", "2d", "--purchase", "both", "--spot-runs", "50"]
    cli.run("plan", *args, "-o", "best.json")
    res = trainplan.plan(model="gpt2-355m", tokens="2e9", instances="p3.8xlarge,p3.16xlarge", max_gpus=32,
                         objective="cost-under-deadline", deadline="2d", purchase="both", spot_runs=50)
    assert res["best"] == json.loads((cli.cwd / "best.json").read_text())


def test_check_memory_and_estimate_agree_with_the_search(searched):
    best = searched["py"]["best"]
    c = trainplan.check(best)
    assert c["fits"] is True
    assert c["peak_memory_bytes"] == best["predicted"]["peak_memory_bytes"]
    assert c["estimate"]["step_time_s"] == best["predicted"]["analytical_step_time_s"]
    assert c["steps"] == best["predicted"]["steps"]
    # check() times the analytical estimate; the search ranks by the simulated step (source "simulated").
    assert c["time_to_train_s"] == pytest.approx(best["predicted"]["steps"] * best["predicted"]["analytical_step_time_s"], rel=1e-12)
    assert max(s["total_bytes"] for s in c["memory_per_stage"]) == c["peak_memory_bytes"]
    # A path works as well as a dict.
    assert trainplan.check(searched["dir"] / "best.json")["estimate"] == c["estimate"]


def test_simulate_equals_cli(searched, cli):
    path = searched["dir"] / "best.json"
    cli.run("simulate", path, "--json", "sim.json")
    expected = json.loads((cli.cwd / "sim.json").read_text())
    got = trainplan.simulate(str(path))
    assert got == expected
    with_timeline = trainplan.simulate(searched["py"]["best"], timeline=True)
    assert with_timeline["step_time_s"] == expected["step_time_s"]
    assert with_timeline["plan"] == "<plan>"
    assert with_timeline["timeline"]["events"]
    assert with_timeline["timeline"]["step_time_s"] == expected["step_time_s"]


def test_job_monte_carlo_equals_cli(searched, cli):
    path = searched["dir"] / "best.json"
    expected = cli.json("job", path, "--purchase", "spot", "--runs", "300", "--seed", "7", "--tokens", "5e9", "--json",
                        "--write-plan", "with-job.json")
    got = trainplan.job(path, purchase="spot", runs=300, seed=7, tokens="5e9")
    assert got.pop("plan_with_job") == json.loads((cli.cwd / "with-job.json").read_text())
    assert got == expected
    assert got["monte_carlo"]["runs"] == 300
    # Another seed gives another sample.
    other = trainplan.job(path, purchase="spot", runs=300, seed=8, tokens="5e9")
    assert other["monte_carlo"] != got["monte_carlo"]


def test_bad_option_error_text_equals_cli(cli):
    with pytest.raises(trainplan.Error) as e:
        trainplan.plan(model="gpt2-124m", tokens="lots", instances="p3.8xlarge")
    cli.assert_same_error(e.value, "plan", "--model", "gpt2-124m", "--tokens", "lots", "--instances", "p3.8xlarge")
    assert e.value.hint


def test_nothing_fits_error_equals_cli(cli):
    with pytest.raises(trainplan.Error) as e:
        trainplan.plan(model="gpt3-175b", tokens="300e9", instances="g4dn.12xlarge", max_gpus=8)
    cli.assert_same_error(e.value, "plan", "--model", "gpt3-175b", "--tokens", "300e9", "--instances", "g4dn.12xlarge",
                          "--max-gpus", "8")
    assert e.value.message.startswith("no plan for gpt3-175b fits in GPU memory")


def test_bad_plan_error_names_the_field(searched):
    bad = dict(searched["py"]["best"], tp=-4)
    with pytest.raises(trainplan.Error) as e:
        trainplan.check(bad)
    assert e.value.file == "<plan>"
    assert e.value.pointer == "/tp"


def test_unknown_keyword_suggests_the_option():
    with pytest.raises(trainplan.Error) as e:
        trainplan.plan(model="gpt2-124m", tokens="1e9", max_gpu=8)
    assert "max_gpu" in e.value.message
    assert "max_gpus" in e.value.hint
    with pytest.raises(trainplan.Error):
        trainplan.job({"model": "gpt2-124m"}, rnus=10)


def test_search_releases_the_gil():
    """A second Python thread keeps counting while a long search runs in the main thread."""
    counts = []
    done = threading.Event()

    def count():
        n = 0
        while not done.is_set():
            n += 1
            counts.append(n)
            time.sleep(0.0005)

    worker = threading.Thread(target=count)
    worker.start()
    while not counts:  # the worker has started
        time.sleep(0.001)
    before = len(counts)
    res = trainplan.plan(model="gpt3-1.3b", tokens="100e9", instances="p4d.24xlarge,p3.16xlarge", max_gpus=32, threads=1)
    during = len(counts) - before
    done.set()
    worker.join()
    assert res["ranked"]
    # Holding the GIL, the search would leave the worker at most a switch or two.
    assert during >= 50, f"the counting thread advanced only {during} times during the search"


@pytest.mark.parametrize("kwargs,flags", [
    (dict(max_gpus=100000), ["--max-gpus", "100000"]),
    (dict(top=0), ["--top", "0"]),
    (dict(spot_runs=-3), ["--spot-runs", "-3"]),
    (dict(platform="ec3"), ["--platform", "ec3"]),
    (dict(purchase="spots"), ["--purchase", "spots"]),
    (dict(zero="0,4"), ["--zero", "0,4"]),
    (dict(deadline="3x"), ["--deadline", "3x"]),
])
def test_keyword_bounds_and_choices_equal_the_cli_flags(cli, kwargs, flags):
    """Keywords meet the bounds and choices of the CLI's flags, with the CLI's error text."""
    options = {**SEARCH, **kwargs}
    with pytest.raises(trainplan.Error) as e:
        trainplan.plan(**options)
    args = [x for k, v in options.items() if k not in kwargs for x in ("--" + k.replace("_", "-"), str(v))]
    cli.assert_same_error(e.value, "plan", *args, *flags)


def test_job_and_simulate_keywords_equal_the_cli_flags(searched, cli):
    path = searched["dir"] / "best.json"
    for kwargs, flags in [(dict(runs=0), ["--runs", "0"]), (dict(data_input="s4"), ["--data-input", "s4"]),
                          (dict(purchase="blend:0"), ["--purchase", "blend:0"]), (dict(epochs=0.0), ["--epochs", "0"])]:
        with pytest.raises(trainplan.Error) as e:
            trainplan.job(path, **kwargs)
        cli.assert_same_error(e.value, "job", path, *flags)
    for kwargs, flags in [(dict(straggler_stddev=2.0), ["--straggler-stddev", "2"]), (dict(fidelity="fast"), ["--fidelity", "fast"]),
                          (dict(trace_ranks="99"), ["--trace-ranks", "99", "--trace", "t.json"])]:
        with pytest.raises(trainplan.Error) as e:
            trainplan.simulate(path, **kwargs)
        cli.assert_same_error(e.value, "simulate", path, *flags)


def test_samples_epochs_and_layout_filters():
    """samples= and epochs= are the work (an image is one token); tp= keeps those degrees and a
    filter that leaves nothing is the CLI's error naming the flag."""
    res = trainplan.plan(model="resnet-50", samples="1.28M", epochs=90, instances="p4d.24xlarge", counts="1",
                         simulate_top=0, top=3)
    assert res["best"]["training"]["tokens"] == pytest.approx(1.28e6 * 90)
    res = trainplan.plan(model="gpt2-124m", tokens="1e9", instances="p4d.24xlarge", counts="1", tp=2, simulate_top=0)
    assert all(c["parallelism"]["tp"] == 2 for c in res["ranked"])
    with pytest.raises(trainplan.Error, match="^--tp: no candidate has a tensor-parallel degree in \\{16\\}"):
        trainplan.plan(model="gpt2-124m", tokens="1e9", instances="p4d.24xlarge", counts="1", tp=16)
