"""A diffusion pipeline component's skip configuration, as the library resolves it
(skipsoftmax/diffusion.h): ModelOpt's ``sparse_attention_config`` in the component's config.json
(``transformer/config.json``) combined with the user's request.

    config = DiffusionSkipConfig("ckpt/transformer", {"target_sparsity": 0.75,
                                                      "disabled_until_timestep": 0.9})
    lam = config.lambda_for("transformer.blocks.3.attn1", max_kv_len=75600, timestep=t)

The request sets lambda directly (``threshold``) or through the checkpoint's calibration
(``target_sparsity``: S = a * exp(b * s), lambda = S / L, dense where S >= L); modules its
``ignore`` patterns match stay dense, and while the normalized timestep t exceeds
``disabled_until_timestep`` D the step stays dense (D = 0: t is never read; no timestep published:
dense, with one warning among ``messages``). ``secondary=True`` (Wan 2.2's transformer_2) leaves a
component whose config cannot serve the request dense, with the reason among ``messages``.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
from typing import Optional

from . import _capi


class DiffusionSkipConfig:
    def __init__(self, component_dir: str | os.PathLike, request: dict, *,
                 secondary: bool = False):
        self._handle = ctypes.c_void_p()
        handle = ctypes.c_void_p()
        _capi.call("skipsoftmax_diffusion_config_load", os.fsencode(component_dir),
                   json.dumps(request).encode(), int(secondary), ctypes.byref(handle))
        self._handle = handle

    def lambda_for(self, module_name: str, max_kv_len: int,
                   timestep: Optional[float] = None) -> float:
        """lambda for one attention call of `module_name` (its full name) over max_kv_len keys
        at the normalized timestep in [0, 1] (None: the pipeline publishes none); 0: dense."""
        self._check_open()
        return _capi.library().skipsoftmax_diffusion_lambda(
            self._handle, module_name.encode(), int(max_kv_len),
            math.nan if timestep is None else float(timestep))

    @property
    def messages(self) -> list[str]:
        """Block keys not read, a secondary component left dense, the gate's warning."""
        self._check_open()
        lib = _capi.library()
        size = lib.skipsoftmax_diffusion_config_messages(self._handle, None, 0)
        text = ctypes.create_string_buffer(size + 1)
        lib.skipsoftmax_diffusion_config_messages(self._handle, text, size + 1)
        return [line for line in text.value.decode(errors="replace").split("\n") if line]

    def close(self) -> None:
        if self._handle:
            _capi.library().skipsoftmax_diffusion_config_free(self._handle)
            self._handle = ctypes.c_void_p()

    def _check_open(self) -> None:
        if not self._handle:
            raise ValueError("the configuration is closed")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
