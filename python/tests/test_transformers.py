"""attn_implementation="skipsoftmax" on tiny randomly initialised Llama- and Gemma 3-style models,
on the CPU (the reference path) or the GPU: the same logits and greedy text as eager attention
where the tables cannot skip, tables read from config.json, sliding layers dense, statistics."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

import skipsoftmax.transformers as sst  # noqa: E402

sst.register()
DEVICE = "cuda" if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0) \
    else "cpu"


def llama(**extra):
    config = transformers.LlamaConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
        **extra)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(torch.bfloat16).to(DEVICE).eval()


def gemma3():
    config = transformers.Gemma3TextConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, head_dim=64, sliding_window=32,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        max_position_embeddings=4096)
    torch.manual_seed(1)
    return transformers.Gemma3ForCausalLM(config).to(torch.bfloat16).to(DEVICE).eval()


def logits(model, ids, implementation):
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model(ids).logits.float()


def greedy(model, ids, implementation, tokens=12):
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=tokens, do_sample=False)[0, ids.shape[1]:]


@pytest.mark.parametrize("make", [llama, gemma3])
def test_matches_eager_attention_without_a_table(make):
    model = make()
    ids = torch.randint(0, 512, (2, 150), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    eager, ours = logits(model, ids, "eager"), logits(model, ids, "skipsoftmax")
    assert (ours - eager).abs().max() < 0.05 * eager.abs().max()
    prompt = ids[:1, :60]
    assert torch.equal(greedy(model, prompt, "skipsoftmax"), greedy(model, prompt, "eager"))


def test_from_pretrained_reads_the_tables_and_counts_tiles(tmp_path):
    # The first bin lies within the prompt: the skip kernels run (and count) in both phases.
    model = llama(skip_softmax_prefill_scale_table=[[64, 2.0]],
                  skip_softmax_decode_scale_table=[[64, 2.0]])
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, attn_implementation="skipsoftmax", dtype=torch.bfloat16).to(DEVICE).eval()
    assert loaded.config.skip_softmax_prefill_scale_table == [[64, 2.0]]
    ids = torch.randint(0, 512, (1, 300), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    with torch.no_grad():
        loaded.generate(ids, max_new_tokens=3, do_sample=False)
    stats = sst.tile_stats(loaded)
    assert sorted(stats) == [0, 1]
    for layer in stats.values():
        assert layer["prefill"][0] > 0 and layer["decode"][0] > 0
        assert 0 <= layer["prefill"][1] <= layer["prefill"][0]
    # Counters made under inference mode (as generate may run) stay readable and resettable.
    with torch.inference_mode():
        loaded.generate(ids[:, :100], max_new_tokens=2, do_sample=False)
    sst.reset_tile_stats(loaded)
    assert all(v == (0, 0) for layer in sst.tile_stats(loaded).values() for v in layer.values())


def test_a_modelopt_block_gives_the_phases_their_curves_and_ignores_layers():
    # ModelOpt 0.46's block: S = a * exp(b * t) at each phase's target, lambda = S / L (here
    # S = 2 in prefill, 3 in decode); layer 0 is ignored and stays dense.
    block = {"config_groups": {"group_0": {
        "algorithm": "skip_softmax", "ignore": ["model.layers.0.self_attn"],
        "threshold_scale_factor": {"formula": "a * exp(b * target_sparsity)",
                                   "prefill": {"a": 2.0, "b": 0.0},
                                   "decode": {"a": 3.0, "b": 0.0}},
        "target_sparsity": {"prefill": 0.5, "decode": 0.5}}},
        "producer": {"name": "modelopt", "version": "0.46.0"}}
    model = llama(sparse_attention_config=block)
    ids = torch.randint(0, 512, (1, 300), generator=torch.Generator().manual_seed(6)).to(DEVICE)
    model.set_attn_implementation("skipsoftmax")
    with torch.no_grad():
        model.generate(ids, max_new_tokens=3, do_sample=False)
    stats = sst.tile_stats(model)
    assert stats[0] == {"prefill": (0, 0), "decode": (0, 0)}
    assert stats[1]["prefill"][0] > 0 and stats[1]["decode"][0] > 0
    # The same tables given as the engine's keys: the same statistics; the keys come first.
    sst.reset_tile_stats(model)
    model.config.skip_softmax_prefill_scale_table = [[1, 2.0]]
    model.config.skip_softmax_decode_scale_table = [[1, 3.0]]
    with torch.no_grad():
        model.generate(ids, max_new_tokens=3, do_sample=False)
    assert sst.tile_stats(model)[1] == stats[1]
    model.config.skip_softmax_prefill_scale_table = None
    model.config.skip_softmax_decode_scale_table = None
    block["config_groups"]["group_0"]["threshold_scale_factor"]["formula"] = "a * t"
    with pytest.raises(ValueError, match="the formula must be"):
        logits(model, ids, "skipsoftmax")


def test_an_unreachable_table_runs_the_dense_kernel_and_counts_nothing():
    model = llama(skip_softmax_prefill_scale_table=[[8192, 40.0]],
                  skip_softmax_decode_scale_table=[[8192, 40.0]])
    ids = torch.randint(0, 512, (1, 100), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    with_table = logits(model, ids, "skipsoftmax")
    model.config.skip_softmax_prefill_scale_table = None
    assert torch.equal(with_table, logits(model, ids, "skipsoftmax"))
    assert all(v == (0, 0) for layer in sst.tile_stats(model).values() for v in layer.values())


@pytest.mark.parametrize("make", [llama, gemma3])
def test_a_left_padded_batch_generates_each_sequences_own_text(make):
    model = make()
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 512, (n,), generator=g) for n in (70, 45)]
    ids = torch.zeros(2, 70, dtype=torch.long)
    mask = torch.zeros(2, 70, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, 70 - len(p):], mask[b, 70 - len(p):] = p, 1
    model.set_attn_implementation("skipsoftmax")
    with torch.no_grad():
        batch_logits = model(ids.to(DEVICE), attention_mask=mask.to(DEVICE)).logits.float()
        batch = model.generate(ids.to(DEVICE), attention_mask=mask.to(DEVICE), max_new_tokens=8,
                               do_sample=False, pad_token_id=0)[:, 70:]
    # Against each sequence alone through the unpadded path (itself checked against eager
    # above): SDPA's logits, and the same greedy text.
    for b, p in enumerate(prompts):
        alone = logits(model, p[None].to(DEVICE), "sdpa")[0]
        assert (logits_b := batch_logits[b, 70 - len(p):]).shape == alone.shape
        assert (logits_b - alone).abs().max() < 0.05 * alone.abs().max()
        assert torch.equal(batch[b], greedy(model, p[None].to(DEVICE), "skipsoftmax", tokens=8))


def test_masks_beyond_causal_and_bad_tables_are_refused():
    model = llama()
    model.set_attn_implementation("skipsoftmax")
    ids = torch.randint(0, 512, (2, 20)).to(DEVICE)
    # Packed sequences (positions restarting, no mask): the kernels would attend across them.
    packed = torch.cat([torch.arange(10), torch.arange(10)])[None].to(DEVICE)
    with pytest.raises(NotImplementedError, match="packed sequences"):
        with torch.no_grad():
            model(ids[:1], position_ids=packed, use_cache=False)
    model.config.skip_softmax_prefill_scale_table = "fast"
    with pytest.raises(ValueError, match="skip_softmax_prefill_scale_table"):
        with torch.no_grad():
            model(ids)
