"""Q/K/V captured by `skipsoftmax capture`, read for the side-by-side benchmark.

A capture directory holds q.npy, k.npy, v.npy ([tokens, heads, head_dim]) or one triple per layer
(layerNN_q.npy, ...). Layers stack along the head axis, so that a launch holds a whole model's
attention on one text: with g = Hq / Hkv query heads a KV head in every layer, query head j of the
i-th stacked layer lands at i * Hq + j and its KV head at i * Hkv + j // g, where the kernels'
(and SDPA's) head // g rule finds it.
"""
import os
import re

import numpy as np

_LAYER_Q = re.compile(r"layer(\d+)_q\.npy")


def load_capture(directory, layers=None):
    """[q, k, v] as float32 arrays: the directory's q/k/v.npy, or its `layers` stacked."""
    if not layers:
        if not os.path.exists(f"{directory}/q.npy"):
            found = sorted(int(m.group(1)) for m in map(_LAYER_Q.fullmatch, os.listdir(directory))
                           if m)
            if found:
                contiguous = found == list(range(found[0], found[-1] + 1))
                layers = (f"{found[0]}-{found[-1]}" if contiguous
                          else ",".join(str(layer) for layer in found))
                raise ValueError(f"{directory} holds one q/k/v triple per layer (layers {layers}):"
                                 f" name the layers to stack, --input-layers {layers}")
        return [np.load(f"{directory}/{t}.npy").astype(np.float32) for t in ("q", "k", "v")]
    out = []
    for t in ("q", "k", "v"):
        parts = [np.load(f"{directory}/layer{layer:02d}_{t}.npy") for layer in layers]
        shapes = {p.shape for p in parts}
        if len(shapes) != 1:
            raise ValueError(f"{directory}: the layers' {t}.npy differ in shape: {sorted(shapes)}")
        out.append(np.concatenate(parts, axis=1).astype(np.float32))
    if out[0].shape[1] % out[1].shape[1]:
        raise ValueError(f"{directory}: {out[0].shape[1]} query heads are not a multiple of "
                         f"{out[1].shape[1]} KV heads")
    return out


def load_capture_option(directory, layers_text):
    """The benchmarks' --inputs and --input-layers: [q, k, v] as load_capture gives them, and the
    words that name them in a JSON."""
    layers = parse_layers(layers_text) if layers_text else None
    words = f"captured from a model: {directory}"
    if layers_text:
        words += f", layers {layers_text} stacked as heads"
    return load_capture(directory, layers), words


def parse_layers(text):
    """'0-29' or '5,11,17' (or a mix) -> a list of layer indices in the order given."""
    layers = []
    for part in text.split(","):
        first, dash, last = part.partition("-")
        if not first.strip().isdigit() or (dash and not last.strip().isdigit()):
            raise ValueError(f"--input-layers: '{part}' is not a layer or a range like 0-29")
        a, b = int(first), int(last) if dash else int(first)
        if b < a:
            raise ValueError(f"--input-layers: the range '{part}' runs backwards")
        layers.extend(range(a, b + 1))
    return layers
