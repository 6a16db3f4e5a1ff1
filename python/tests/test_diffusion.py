"""skipsoftmax.DiffusionSkipConfig: a pipeline component's config.json block and the request, as
the library resolves them (the per-module lambda, ignore patterns, the timestep gate, a secondary
component left dense)."""

import json
import math

import pytest

import skipsoftmax

BLOCK = {"config_groups": {"group_0": {
    "algorithm": "skip_softmax", "ignore": ["blocks.0.*"],
    "threshold_scale_factor": {"formula": "a * exp(b * target_sparsity)",
                               "prefill": {"a": 1000.0, "b": 5.0}}}},
    "producer": {"name": "modelopt", "version": "0.46.0"}}


def component(tmp_path, config, name="transformer"):
    d = tmp_path / name
    d.mkdir()
    if config is not None:
        (d / "config.json").write_text(json.dumps(config))
    return d


def test_target_sparsity_ignore_and_the_timestep_gate(tmp_path):
    d = component(tmp_path, {"_class_name": "WanTransformer3DModel",
                             "sparse_attention_config": BLOCK})
    with skipsoftmax.DiffusionSkipConfig(d, {"target_sparsity": 0.5,
                                             "disabled_until_timestep": 0.9}) as c:
        expected = 1000.0 * math.exp(5.0 * 0.5) / 75600
        assert c.lambda_for("transformer.blocks.1.attn1", 75600, 0.5) == pytest.approx(expected)
        assert c.lambda_for("transformer.blocks.0.attn1", 75600, 0.5) == 0.0  # ignored
        assert c.lambda_for("transformer.blocks.1.attn1", 75600, 0.95) == 0.0  # before the cutoff
        assert c.lambda_for("transformer.blocks.1.attn1", 10000, 0.5) == 0.0  # S >= L: guard
        assert not any("publishes no timestep" in m for m in c.messages)
        assert c.lambda_for("transformer.blocks.1.attn1", 75600, None) == 0.0
        assert c.lambda_for("transformer.blocks.1.attn1", 75600, None) == 0.0
        assert sum("publishes no timestep" in m for m in c.messages) == 1  # warned once
    with pytest.raises(ValueError, match="closed"):
        c.lambda_for("transformer.blocks.1.attn1", 75600, 0.5)


def test_a_threshold_needs_no_calibration_and_bad_requests_are_named(tmp_path):
    d = component(tmp_path, {"_class_name": "WanTransformer3DModel"})
    c = skipsoftmax.DiffusionSkipConfig(d, {"threshold": 0.05})
    assert c.lambda_for("transformer.blocks.0.attn1", 100, None) == 0.05  # no gate: t unread
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="needs the checkpoint's calibration"):
        skipsoftmax.DiffusionSkipConfig(d, {"target_sparsity": 0.5})
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="both threshold and target_sparsity"):
        skipsoftmax.DiffusionSkipConfig(d, {"threshold": 0.1, "target_sparsity": 0.5})
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="unknown key"):
        skipsoftmax.DiffusionSkipConfig(d, {"lambda": 0.1})
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="config.json: no such file"):
        skipsoftmax.DiffusionSkipConfig(tmp_path / "nowhere", {"threshold": 0.1})


def test_a_secondary_component_that_cannot_be_read_stays_dense(tmp_path):
    d = component(tmp_path, None, "transformer_2")
    c = skipsoftmax.DiffusionSkipConfig(d, {"target_sparsity": 0.5}, secondary=True)
    assert c.lambda_for("transformer_2.blocks.1.attn1", 75600, 0.5) == 0.0
    assert any("transformer_2 stays dense" in m for m in c.messages)
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="both"):
        skipsoftmax.DiffusionSkipConfig(d, {"threshold": 0.1, "target_sparsity": 0.5},
                                        secondary=True)
