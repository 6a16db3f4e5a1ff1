"""python -m skipsoftmax capture on a tiny randomly initialised Llama with a word-level
tokenizer: the files and manifest that `skipsoftmax calibrate --captures-dir` reads, Q/K/V that
reproduce the model's own attention output, prompt files, and refusals that leave nothing behind."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from skipsoftmax.__main__ import main  # noqa: E402
from conftest import reference_attention  # noqa: E402

WORDS = ("the of and to in a is that it was for on are as with his they at be this from have or "
         "by one had not but what all were when we there can an your which their said").split()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    vocab = {"[UNK]": 0, "<s>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]",
                                                bos_token="<s>")
    fast.save_pretrained(path)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(path)
    text = path / "text.txt"
    rng = np.random.default_rng(0)
    text.write_text(" ".join(rng.choice(WORDS, 300)) + "\n")
    return path, text


def run(*args):
    return main(["capture", *map(str, args), "--device", "cpu"])


def test_text_capture_reproduces_the_attention_output(checkpoint, tmp_path):
    path, text = checkpoint
    out = tmp_path / "cap"
    assert run("--model", path, "--text", text, "--tokens", 100, "--out-dir", out,
               "--layers", "0,1") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokens"] == "tokens.npy" and [e["layer"] for e in manifest["layers"]] == [0, 1]
    ids = np.load(out / "tokens.npy")
    assert ids.dtype == np.int32 and ids.shape == (100,)
    q = torch.from_numpy(np.load(out / manifest["layers"][0]["q"]))
    k = torch.from_numpy(np.load(out / manifest["layers"][0]["k"]))
    v = torch.from_numpy(np.load(out / manifest["layers"][0]["v"]))
    assert q.shape == (100, 4, 64) and k.shape == v.shape == (100, 2, 64)

    # The model's attention output of layer 0 (the input of o_proj), under eager attention.
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.bfloat16, attn_implementation="eager").eval()
    seen = {}
    def keep(module, inputs):
        seen["x"] = inputs[0][0].float()

    model.model.layers[0].self_attn.o_proj.register_forward_pre_hook(keep)
    with torch.no_grad():
        model(torch.from_numpy(ids.astype(np.int64))[None])
    ours = reference_attention(q, k, v, scale=model.model.layers[0].self_attn.scaling)
    assert (ours.reshape(100, -1) - seen["x"]).abs().max() < 0.02


def test_prompt_files_become_one_capture_each(checkpoint, tmp_path):
    path, _ = checkpoint
    prompts = tmp_path / "samples"
    prompts.mkdir()
    np.save(prompts / "prompt_64_0.npy", np.arange(1, 65, dtype=np.int32) % 40 + 1)
    np.save(prompts / "prompt_64_1.npy", np.arange(2, 66, dtype=np.int32) % 40 + 1)
    out = tmp_path / "caps"
    assert run("--model", path, "--prompts", prompts, "--out-dir", out, "--dtype", "f16") == 0
    assert sorted(p.name for p in out.iterdir()) == ["prompt_64_0", "prompt_64_1"]
    for d in out.iterdir():
        manifest = json.loads((d / "manifest.json").read_text())
        assert len(manifest["layers"]) == 2 and manifest["dtype"] == "float16"
        assert np.load(d / "layer01_k.npy").dtype == np.float16


def test_refusals_leave_nothing_behind(checkpoint, tmp_path, capsys):
    path, text = checkpoint
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    assert run("--model", path, "--text", text, "--tokens", 10, "--out-dir", full) == 1
    assert "not an empty directory" in capsys.readouterr().err
    out = tmp_path / "new"
    assert run("--model", path, "--text", text, "--tokens", 100000, "--out-dir", out) == 1
    assert "fewer than the 100000 that 1 window(s)" in capsys.readouterr().err
    assert run("--model", path, "--text", text, "--tokens", 10, "--out-dir", out,
               "--layers", "5") == 1
    assert "outside the model's 2 layers" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    np.save(bad / "prompt_1_0.npy", np.zeros((2, 2), dtype=np.float32))
    assert run("--model", path, "--prompts", bad, "--out-dir", out) == 1
    assert "1-D integer array" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "full"]


def test_a_checkpoint_without_gguf_calibrates_from_its_captures(checkpoint, tmp_path):
    """capture -> skipsoftmax calibrate --captures-dir -> config.json -> from_pretrained, for a
    model the C++ engine cannot load: the geometry from its config.json, the prompts from the
    captures (windows of a text, two of each bin's length)."""
    tool = os.environ.get("SKIPSOFTMAX_TOOL", "")
    if not os.access(tool, os.X_OK):
        pytest.skip("needs the skipsoftmax tool (SKIPSOFTMAX_TOOL)")
    path, _ = checkpoint
    ck = tmp_path / "ck"
    shutil.copytree(path, ck)
    text = tmp_path / "long.txt"
    text.write_text(" ".join(np.random.default_rng(1).choice(WORDS, 2000)) + "\n")
    caps = tmp_path / "caps"
    assert run("--model", ck, "--text", text, "--tokens", 256, 384, "--samples", 2,
               "--out-dir", caps) == 0
    assert sorted(p.name for p in caps.iterdir()) == [
        "prompt_256_0", "prompt_256_1", "prompt_384_0", "prompt_384_1"]
    calibrate = [tool, "calibrate", "--model-dir", ck, "--captures-dir", caps, "--phase",
                 "prefill", "--bin-min", "256", "--bin-step", "128", "--max-seqlen", "384"]
    done = subprocess.run([*map(str, calibrate), "--samples", "2"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert "llama, 2 layers, 2 bins x 2 prompts" in done.stderr
    config = json.loads((ck / "config.json").read_text())
    assert config["num_hidden_layers"] == 2  # the model's keys stay
    # A random model's flat attention reaches few tiers at these lengths: the keys are there, the
    # unreachable tiers left out (the calibration's own rule).
    assert isinstance(config["skip_softmax_prefill_scale_tables"], dict)
    assert "skip_softmax_prefill_shape_advice" in config
    import skipsoftmax.transformers as sst
    sst.register()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        ck, attn_implementation="skipsoftmax", dtype=torch.bfloat16)
    assert loaded.config.skip_softmax_prefill_scale_table == \
        config["skip_softmax_prefill_scale_table"]
    # Three prompts a bin: the captures hold two, and say which lengths they hold.
    more = subprocess.run([*map(str, calibrate), "--samples", "3"], capture_output=True, text=True)
    assert more.returncode != 0
    assert "hold 2 prompt(s) of 256 tokens, calibration needs 3" in more.stderr, more.stderr
    assert "2 x 256, 2 x 384" in more.stderr
    # No captures: the checkpoint's missing GGUF is named with the way out.
    bare = subprocess.run([*map(str, calibrate[:4]), *map(str, calibrate[6:])],
                          capture_output=True, text=True)
    assert bare.returncode != 0 and "no .gguf model file in it" in bare.stderr
