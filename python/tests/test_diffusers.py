"""skipsoftmax.diffusers on a tiny randomly initialised Wan 2.1 transformer (no diffusion weights
can be fetched here), on the CPU reference or the GPU: gated steps bit for bit as the dense
kernels, skip steps on the skip kernel, ignore patterns, cross-attention left to diffusers,
statistics per module and step, and diffusers' own backend restored."""

import json

import pytest
import torch

diffusers = pytest.importorskip("diffusers")

import skipsoftmax  # noqa: E402
import skipsoftmax.diffusers as sd  # noqa: E402
from conftest import sink_shaped  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0) \
    else "cpu"


def wan():
    torch.manual_seed(0)
    model = diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64, in_channels=4,
        out_channels=4, text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True,
        rope_max_seq_len=64)
    return model.to(torch.bfloat16).to(DEVICE).eval()


def component(tmp_path, block=None, name="transformer"):
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    config = {"_class_name": "WanTransformer3DModel"}
    if block is not None:
        config["sparse_attention_config"] = block
    (d / "config.json").write_text(json.dumps(config))
    return d


def inputs():
    g = torch.Generator().manual_seed(1)
    # 4 latent frames of 16 x 16: 256 tokens, two KV tiles of 128 keys at head dim 64.
    x = torch.randn(1, 4, 4, 16, 16, generator=g).to(torch.bfloat16).to(DEVICE)
    text = torch.randn(1, 8, 32, generator=g).to(torch.bfloat16).to(DEVICE)
    return x, text


def step(model, x, text, timestep):
    with torch.no_grad():
        return model(x, torch.tensor([timestep], device=DEVICE), text, return_dict=False)[0]


def test_gated_steps_are_the_dense_kernels_bits_and_later_steps_skip(tmp_path):
    model, (x, text) = wan(), inputs()
    native = [step(model, x, text, t) for t in (900, 300)]
    d = component(tmp_path)
    dense_route = sd.enable(components={"transformer": model}, component_dirs={"transformer": d})
    dense = [step(model, x, text, t) for t in (900, 300)]
    dense_route.disable()
    for ours, theirs in zip(dense, native):  # our dense kernels against diffusers' SDPA
        assert (ours.float() - theirs.float()).abs().max() < 0.1 * theirs.float().abs().max()
    route = sd.enable(components={"transformer": model}, component_dirs={"transformer": d},
                      request={"threshold": 0.9, "disabled_until_timestep": 0.6})
    gated, skipped = step(model, x, text, 900), step(model, x, text, 300)
    route.disable()
    assert torch.equal(gated, dense[0])  # t = 0.9 > D: the dense kernel, bit for bit
    stats = route.tile_stats()["transformer"]
    assert sorted(stats) == ["transformer.blocks.0.attn1", "transformer.blocks.1.attn1"]
    for per_step in stats.values():
        # Step 0 gated (the dense kernel counts nothing); step 1 on the skip kernel: 4 query tiles
        # x 2 KV tiles x 2 heads visited.
        assert per_step[0] == (0, 0) and per_step[1][0] == 16
    assert (skipped.float() - dense[1].float()).abs().max() < 0.1 * dense[1].float().abs().max()
    # diffusers' own backend is back.
    assert torch.equal(step(model, x, text, 300), native[1])


def test_ignored_modules_stay_dense_and_a_secondary_component_without_config(tmp_path):
    block = {"config_groups": {"group_0": {
        "algorithm": "skip_softmax", "ignore": ["blocks.0.*"],
        "threshold_scale_factor": {"formula": "a * exp(b * target_sparsity)",
                                   "prefill": {"a": 1.0, "b": 0.0}}}}}
    model, other, (x, text) = wan(), wan(), inputs()
    d = component(tmp_path, block)
    missing = tmp_path / "transformer_2"
    missing.mkdir()
    route = sd.enable(components={"transformer": model, "transformer_2": other},
                      component_dirs={"transformer": d, "transformer_2": missing},
                      request={"target_sparsity": 0.5})
    step(model, x, text, 500)
    step(other, x, text, 500)
    route.disable()
    stats = route.tile_stats()
    assert stats["transformer"]["transformer.blocks.0.attn1"] == [(0, 0)]  # ignored: dense
    assert stats["transformer"]["transformer.blocks.1.attn1"][0][0] == 16   # S = 1: skip kernel
    assert all(v == [(0, 0)] for v in stats["transformer_2"].values())      # left dense
    assert any("transformer_2 stays dense" in m for m in route.messages()["transformer_2"])


def test_the_route_skips_on_an_a_shaped_attention(tmp_path):
    # The backend on sink-shaped Q/K (the random Wan above has flat attention): its skip
    # decisions and output are skipsoftmax.prefill's at the configuration's lambda.
    q, k, v = (t[None].to(DEVICE) for t in sink_shaped(1024, 4, 4, 64, torch.bfloat16,
                                                        generator=torch.Generator().manual_seed(2)))
    d = component(tmp_path)
    model = wan()
    route = sd.enable(components={"transformer": model}, component_dirs={"transformer": d},
                      request={"threshold": 0.01})
    try:
        token = sd._current.set((route, "transformer", "transformer.blocks.0.attn1"))
        out = sd._backend(q, k, v)
        sd._current.reset(token)
    finally:
        route.disable()
    stats = torch.zeros(1, 2, dtype=torch.int64, device=DEVICE)
    ref = skipsoftmax.prefill(q, k, v, causal=False, threshold=0.01, stats=stats)
    assert torch.equal(out, ref)
    visited, skipped = route.tile_stats()["transformer"]["transformer.blocks.0.attn1"][0]
    assert (visited, skipped) == tuple(stats[0].tolist()) and skipped > visited // 4
