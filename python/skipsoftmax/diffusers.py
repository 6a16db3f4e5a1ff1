"""diffusers pipelines on the kernels: one call routes a diffusion transformer's attention to the
non-causal prefill kernels, with the design's per-module lambda and timestep gate.

    import skipsoftmax.diffusers
    route = skipsoftmax.diffusers.enable(pipe, {"target_sparsity": 0.75,
                                                "disabled_until_timestep": 0.9})
    video = pipe(prompt, ...).frames
    route.tile_stats()   # {component: {module: [(visited, skipped) per step]}}
    route.disable()

Each component (``transformer``, ``transformer_2``) reads ModelOpt's ``sparse_attention_config``
from its own config.json (skipsoftmax.DiffusionSkipConfig; a secondary component whose config
cannot serve the request stays dense, with a warning). The pipeline's timestep is taken from each
call of the component (its ``timestep`` argument over the scheduler's ``num_train_timesteps``: the
rectified-flow sigma for Wan and Flux), read by the gate on every attention call: steps before
``disabled_until_timestep`` run the dense kernel, bit for bit as with no request.

How it routes: while enabled, diffusers' native attention backend (the default of its attention
dispatcher, which Wan, Flux, HunyuanVideo and Qwen-Image call) is replaced by a function that runs
our kernels for the self-attention of the enabled components' attention modules, in float16 or
bfloat16 with head dim 64, 128 or 256, and hands everything else (masks, dropout, cross-attention
unless ``cross_attention=True``, other models) to the native backend unchanged. A pipeline forced
onto another backend (``set_attention_backend``) is not routed.
"""

from __future__ import annotations

import contextvars
import os
import pathlib
from typing import Optional

import torch

from . import ops
from .diffusion import DiffusionSkipConfig

_COMPONENTS = ("transformer", "transformer_2")
_DTYPES = (torch.float16, torch.bfloat16)
# (the Route, the module's full name) of the attention module running now.
_current: contextvars.ContextVar = contextvars.ContextVar("skipsoftmax_module", default=None)
_native = None  # diffusers' native backend function while a route is enabled
_enabled: list = []


class Route:
    """The routing of one pipeline: its components' configurations, the published timestep and
    the statistics per module and step. `disable()` undoes it."""

    def __init__(self, configs: dict, cross_attention: bool, num_train_timesteps: float):
        self.configs = configs  # component name -> DiffusionSkipConfig
        self.cross_attention = cross_attention
        self.num_train_timesteps = float(num_train_timesteps)
        self.timestep: Optional[float] = None  # normalized, of the current step
        self.steps: dict = {name: -1 for name in configs}
        self._stats: dict = {name: {} for name in configs}
        self._hooks: list = []

    def tile_stats(self) -> dict:
        """{component: {module: [(visited, skipped) for each step]}}: the skip kernel's tiles
        (dense calls, ignored modules and gated steps count (0, 0)). Reads the device."""
        out = {}
        for component, modules in self._stats.items():
            out[component] = {name: [tuple(int(x) for x in step.tolist()) for step in steps]
                              for name, steps in modules.items()}
        return out

    def messages(self) -> dict:
        return {name: c.messages for name, c in self.configs.items()}

    def disable(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if self in _enabled:
            _enabled.remove(self)
        if not _enabled:
            _restore_native()

    def _record(self, component: str, module: str, counts: torch.Tensor) -> None:
        steps = self._stats[component].setdefault(module, [])
        step = max(self.steps[component], 0)
        while len(steps) <= step:
            steps.append(torch.zeros(2, dtype=torch.int64, device=counts.device))
        steps[step] += counts.sum(0)


def _registry():
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry
    return _AttentionBackendRegistry, AttentionBackendName.NATIVE


def _install_native() -> None:
    global _native
    if _native is not None:
        return
    registry, native = _registry()
    _native = registry._backends[native]
    registry._backends[native] = _backend


def _restore_native() -> None:
    global _native
    if _native is None:
        return
    registry, native = _registry()
    registry._backends[native] = _native
    _native = None


def _backend(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             **kwargs):
    """query [B, Sq, H, D], key and value [B, Sk, Hkv, D], as diffusers' dispatcher passes them."""
    current = _current.get()
    native = _native
    routed = (current is not None and attn_mask is None and not dropout_p and not is_causal
              and query.dtype in _DTYPES and key.dtype == query.dtype and value.dtype == query.dtype
              and query.shape[-1] in (64, 128, 256) and query.dim() == 4
              and query.device.type in ("cuda", "cpu"))
    if routed:
        route, component, name = current
        cross = key.shape[1] != query.shape[1]
        routed = route.cross_attention or not cross
    if not routed:
        return native(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                      is_causal=is_causal, scale=scale, **kwargs)
    lam = route.configs[component].lambda_for(name, key.shape[1], route.timestep)
    stats = torch.zeros(query.shape[0], 2, dtype=torch.int64, device=query.device)
    out = ops.prefill(query, key, value, causal=False, softmax_scale=scale,
                      threshold=lam if lam > 0.0 else None, stats=stats)
    route._record(component, name, stats)
    return out


def _attach(route: Route, component: str, module: torch.nn.Module) -> None:
    def timestep_hook(_, args, kwargs):
        t = kwargs.get("timestep", args[1] if len(args) > 1 else None)
        # One host read of the step's timestep (not one per attention call).
        route.timestep = None if t is None else \
            float(torch.as_tensor(t).flatten()[0].item()) / route.num_train_timesteps
        route.steps[component] += 1

    route._hooks.append(module.register_forward_pre_hook(timestep_hook, with_kwargs=True))
    for name, sub in module.named_modules():
        if not hasattr(sub, "processor") or not name:
            continue
        full = f"{component}.{name}"

        def enter(_, args, full=full):
            _current.set((route, component, full))

        def leave(*_):
            _current.set(None)

        route._hooks.append(sub.register_forward_pre_hook(enter))
        route._hooks.append(sub.register_forward_hook(leave))


def enable(pipe=None, request: Optional[dict] = None, *, components: Optional[dict] = None,
           component_dirs: Optional[dict] = None, num_train_timesteps: Optional[float] = None,
           cross_attention: bool = False) -> Route:
    """Routes the attention of `pipe`'s transformer components (or of `components`, a {name:
    module} dict) to the kernels under `request` ({"threshold" | "target_sparsity",
    "disabled_until_timestep"}; None or {}: dense kernels). Each component's config.json is read
    from `component_dirs[name]`, else <pipeline path>/<name>; num_train_timesteps from the
    pipeline's scheduler (1000 without one)."""
    request = dict(request or {})
    if components is None:
        if pipe is None:
            raise ValueError("give a pipeline or components={name: module}")
        components = {n: getattr(pipe, n) for n in _COMPONENTS if getattr(pipe, n, None) is not None}
    if not components:
        raise ValueError("no transformer component to route")
    if num_train_timesteps is None:
        scheduler = getattr(pipe, "scheduler", None)
        num_train_timesteps = getattr(getattr(scheduler, "config", None), "num_train_timesteps",
                                      1000) if scheduler is not None else 1000
    root = getattr(getattr(pipe, "config", None), "_name_or_path", None)
    configs = {}
    for i, name in enumerate(components):
        directory = (component_dirs or {}).get(name)
        if directory is None and root:
            directory = pathlib.Path(root) / name
        if directory is None:
            raise ValueError(f"{name}: no directory to read its config.json from; pass "
                             f"component_dirs={{'{name}': path}}")
        configs[name] = DiffusionSkipConfig(os.fspath(directory), request, secondary=i > 0)
    route = Route(configs, cross_attention, num_train_timesteps)
    for name, module in components.items():
        _attach(route, name, module)
    _install_native()
    _enabled.append(route)
    return route
