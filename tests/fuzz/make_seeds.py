#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets (scripts/fuzz.sh) into DIR/{npy,gguf,json,tokenizer}:
small valid files of each format, so that the fuzzer starts from inputs that reach deep into the
readers. Standard library only."""

import json
import pathlib
import struct
import sys


def npy(descr, shape, payload):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join(f"{d}, " for d in shape).rstrip(" ") if len(shape) != 1 else f"{shape[0]},")
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(tensor_values):
    """A llama-family GGUF v3 with a byte-level BPE vocabulary and one F32 tensor."""
    tokens = ["<unk>", "<s>", "</s>", "\u0120"] + [chr(c) for c in range(33, 127)] + ["aa", "th"]
    meta = [
        ("general.architecture", 8, gguf_string("llama")),
        ("llama.block_count", 4, struct.pack("<I", 1)),
        ("llama.embedding_length", 4, struct.pack("<I", 8)),
        ("llama.feed_forward_length", 4, struct.pack("<I", 16)),
        ("llama.attention.head_count", 4, struct.pack("<I", 2)),
        ("llama.attention.head_count_kv", 4, struct.pack("<I", 1)),
        ("llama.context_length", 4, struct.pack("<I", 64)),
        ("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)),
        ("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
        ("tokenizer.ggml.model", 8, gguf_string("gpt2")),
        ("tokenizer.ggml.tokens", 9,
         struct.pack("<IQ", 8, len(tokens)) + b"".join(gguf_string(t) for t in tokens)),
        ("tokenizer.ggml.merges", 9,
         struct.pack("<IQ", 8, 2) + gguf_string("a a") + gguf_string("t h")),
        ("tokenizer.ggml.unknown_token_id", 4, struct.pack("<I", 0)),
    ]
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, len(meta))
    for key, kind, value in meta:
        out += gguf_string(key) + struct.pack("<I", kind) + value
    out += gguf_string("token_embd.weight") + struct.pack("<IQIQ", 1, len(tensor_values), 0, 0)
    out += b"\0" * ((32 - len(out) % 32) % 32)
    return out + struct.pack(f"<{len(tensor_values)}f", *tensor_values)


def main():
    root = pathlib.Path(sys.argv[1])
    seeds = {
        "npy": {
            "f32.npy": npy("<f4", (2, 3), struct.pack("<6f", *range(6))),
            "i64.npy": npy("<i8", (4,), struct.pack("<4q", 0, 5, -1, 7)),
            "f16.npy": npy("<f2", (1, 2, 2), struct.pack("<4e", 0.5, -1, 2, 3)),
        },
        "gguf": {"tiny.gguf": gguf([0.25] * 8)},
        "json": {
            "checkpoint.json": json.dumps({
                "hidden_size": 64,
                "skip_softmax_prefill_scale_table": [[512, 100]],
                "skip_softmax_prefill_scale_tables": {"75%": [[1024, 2048], [4096, 3000]]},
                "skip_softmax_prefill_target_sparsity": "75%",
                "skip_softmax_decode_threshold": 0.001,
            }).encode(),
            "engine.json": json.dumps({
                "checkpoint_dir": "/ck",
                "skip_softmax_prefill_scale_table": [[512, 100]],
                "skip_softmax_prefill_source": "checkpoint",
                "model_config": {"a": [1, 2, {"b": None}]},
            }).encode(),
            "requests.json": json.dumps(
                ["a prompt", {"token_ids": [5, 6], "max_new_tokens": 2, "id": "b"}]).encode(),
            "diffusion.json": json.dumps({
                "target_sparsity": 0.5, "disabled_until_timestep": 0.3}).encode(),
            "table.json": b"[[1024, 9.5], [2048, 30]]",
        },
        "tokenizer": {
            "prose.txt": "The three most important things, 12 times: don't stop!\n".encode(),
            "run.txt": b"a" * 512,
            "mixed.txt": "caf\u00e9 \u00fc\u00df \U0001f600 \tthe  aa".encode() + b"\xff\xfe",
        },
    }
    for target, files in seeds.items():
        (root / target).mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (root / target / name).write_bytes(data)


if __name__ == "__main__":
    main()
