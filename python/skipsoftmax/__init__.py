"""skipsoftmax: skip-softmax (BLASST) attention for NVIDIA Hopper GPUs, from PyTorch.

    import skipsoftmax
    out = skipsoftmax.prefill(q, k, v, scale_table=[[4096, 40.0], [8192, 60.0]])
    out = skipsoftmax.decode(q, k_cache, v_cache, page_table, seq_lens, max_seq_len=n)

The ops run the Hopper kernels on CUDA tensors and the float64 reference (the same skip
decisions) on CPU tensors. skipsoftmax.transformers registers an attention implementation for
Hugging Face models.
"""

from ._capi import SkipSoftmaxCudaError, SkipSoftmaxError, version
from .diffusion import DiffusionSkipConfig
from .ops import KV_ORDERS, decode, prefill

__all__ = ["prefill", "decode", "version", "KV_ORDERS", "DiffusionSkipConfig",
           "SkipSoftmaxError", "SkipSoftmaxCudaError"]
__version__ = "0.5.0"
