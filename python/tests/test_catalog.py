# The hardware catalog from Python: the same JSON as `trainplan catalog --json`.
import json

import pytest
import trainplan


def test_catalog_equals_cli_json(cli):
    assert trainplan.catalog() == cli.json("catalog", "--json")


def test_instance_detail_equals_cli_json(cli):
    for name in ["p4d.24xlarge", "p3.16xlarge", "g5.xlarge"]:
        assert trainplan.catalog(name) == cli.json("catalog", name, "--json")
        assert trainplan.Catalog().describe(name) == trainplan.catalog(name)


def test_catalog_lists_and_lookups():
    cat = trainplan.Catalog()
    names = cat.instance_names()
    assert names == [i["name"] for i in trainplan.catalog()["instances"]]
    assert "p4d.24xlarge" in cat
    assert "p9.huge" not in cat
    p4d = cat.instance("p4d.24xlarge")
    assert p4d["gpu_count"] == 8
    gpu = cat.gpu(p4d["gpu"])
    assert gpu == trainplan.catalog()["gpus"][p4d["gpu"]]


def test_cluster_summary_counts_gpus_and_crosses_the_network():
    cat = trainplan.Catalog()
    one = cat.cluster("p4d.24xlarge")
    assert (one["nodes"], one["gpus_per_node"], one["gpus"]) == (1, 8, 8)
    assert one["vertices"]["gpu"] == 8
    assert one["link_matrix"] == cat.describe("p4d.24xlarge")["link_matrix"]
    two = cat.cluster("p4d.24xlarge", 2)
    assert (two["nodes"], two["gpus"]) == (2, 16)
    assert two["vertices"]["gpu"] == 16
    # GPU 0 -> GPU 8 is on the other node: the route is no faster than the slowest network link.
    route = two["farthest_route"]
    assert route["to_gpu"] == 8
    assert route["bottleneck_bandwidth_bytes_per_s"] <= two["links"]["network"]["max_bandwidth_bytes_per_s"]
    assert route["bottleneck_bandwidth_bytes_per_s"] < one["farthest_route"]["bottleneck_bandwidth_bytes_per_s"]


def test_price_file_applies(tmp_path, cli):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"region": "eu-west-1", "source": "test quote", "date": "2026-11-01",
                                  "prices": {"p4d.24xlarge": {"ec2_on_demand": 19.5}}}))
    cat = trainplan.Catalog(prices=prices)
    assert cat.instance("p4d.24xlarge")["prices"]["ec2_on_demand_usd_per_hour"] == 19.5
    assert cat.to_json() == cli.json("--prices", prices, "catalog", "--json")
    # The built-in catalog is unchanged.
    assert trainplan.Catalog().instance("p4d.24xlarge")["prices"]["ec2_on_demand_usd_per_hour"] != 19.5


def test_unknown_instance_is_a_trainplan_error(cli):
    with pytest.raises(trainplan.Error) as e:
        trainplan.catalog("p4d.24xlarg")
    cli.assert_same_error(e.value, "catalog", "p4d.24xlarg")
    assert "p4d.24xlarge" in e.value.hint


def test_region_prices_match_the_cli(cli):
    # p4d.24xlarge in eu-west-1: the region table's figures (SkyPilot snapshot of the AWS Price List).
    cat = trainplan.Catalog(region="eu-west-1")
    assert cat.region == "eu-west-1"
    assert trainplan.Catalog().region == "us-east-1"
    prices = cat.instance("p4d.24xlarge")["prices"]
    assert prices["ec2_on_demand_usd_per_hour"] == 35.39655
    assert prices["region"] == "eu-west-1"
    assert cat.to_json() == cli.json("--region", "eu-west-1", "catalog", "--json")
    assert cat.regions() == cli.json("catalog", "--regions", "--json")
    assert "eu-west-1" not in cat.regions()["instances"]["p5.48xlarge"]


def test_unknown_region_is_a_trainplan_error():
    with pytest.raises(trainplan.Error) as e:
        trainplan.Catalog(region="mars-north-1")
    assert "eu-west-1" in e.value.hint
