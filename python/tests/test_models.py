# Models from Python: catalog lookup, Hugging Face import from a dict or a path, and the same
# JSON as `trainplan model --json`; parameter counts against the published ones.
import json

import pytest
import trainplan

GPT2_124M = 124_439_808        # GPT-2 small (Radford et al. 2019; HF gpt2 num_parameters())
LLAMA2_7B = 6_738_415_616      # Llama 2 7B (Touvron et al. 2023; HF meta-llama/Llama-2-7b-hf)


@pytest.fixture(scope="module")
def hf_dir(source_dir):
    return source_dir / "tests" / "models" / "data" / "hf"


def test_catalog_models_have_published_parameter_counts():
    assert trainplan.Model("gpt2-124m").params == GPT2_124M
    assert trainplan.Model("llama2-7b").params == LLAMA2_7B


def test_hf_config_from_a_dict_and_from_a_path(hf_dir):
    for folder, params in [("gpt2", GPT2_124M), ("llama-2-7b", LLAMA2_7B)]:
        path = hf_dir / folder / "config.json"
        from_dict = trainplan.Model.from_hf_config(json.loads(path.read_text()), name=folder)
        from_path = trainplan.Model.from_hf_config(path)
        assert from_dict.params == params
        assert from_path.params == params
        assert from_path.name == folder
        # Everything but the provenance ("source" names the file or the dict) is the same.
        assert {**from_dict.to_json(), "source": ""} == {**from_path.to_json(), "source": ""}


def test_model_json_equals_cli(cli, hf_dir):
    assert trainplan.model("gpt3-13b") == cli.json("model", "gpt3-13b", "--json")
    assert trainplan.model("llama2-7b", ops_unit=2) == cli.json("model", "llama2-7b", "--json", "--ops", "--unit", "2")
    path = hf_dir / "mistral-7b" / "config.json"
    assert trainplan.model(path) == cli.json("model", path, "--json")
    assert trainplan.Model(str(path)).to_json() == trainplan.model(path)
    assert trainplan.models() == cli.json("model", "--json")


def test_flops_per_token_is_close_to_6n_plus_12lsh():
    m = trainplan.Model("gpt3-175b")
    j = m.to_json()
    assert m.training_flops_per_token == j["training_flops_per_token"]
    assert m.training_flops_per_token == pytest.approx(j["six_n_plus_12lsh_flops_per_token"], rel=0.02)
    assert m.tokens_per_sample == 2048


def test_model_from_spec_dict():
    spec = {"name": "tiny-test", "family": "gpt", "layers": 2, "hidden": 64, "heads": 4, "vocab": 1000, "seq_len": 128}
    m = trainplan.Model.from_spec(spec)
    # GPT: embeddings (V + s) h, per layer 12 h^2 + 13 h, final layernorm 2h; tied head.
    h, layers, v, s = 64, 2, 1000, 128
    assert m.params == (v + s) * h + layers * (12 * h * h + 13 * h) + 2 * h


def test_bad_hf_config_error_names_the_key():
    with pytest.raises(trainplan.Error) as e:
        trainplan.Model.from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12}, name="broken")
    assert e.value.file == "<config broken>"
    assert "vocab_size" in str(e.value)


def test_unknown_model_error_text_equals_cli(cli):
    with pytest.raises(trainplan.Error) as e:
        trainplan.model("gpt2-124")
    cli.assert_same_error(e.value, "model", "gpt2-124")
