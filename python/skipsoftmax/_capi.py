"""ctypes binding of libskipsoftmax_capi (include/skipsoftmax/c_api.h).

The library is found next to this file (a wheel bundles it there) or at $SKIPSOFTMAX_LIBRARY (a
build tree's libskipsoftmax_capi.so, for development). Its argument structs carry their size and
the library its version: a library of another minor version is refused by name at load time.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import threading

# The C API this binding mirrors; the library must have the same major.minor.
API_VERSION = (0, 5)

FP16, BF16 = 0, 1  # enum skipsoftmax_dtype
AUTO = -1  # SKIPSOFTMAX_AUTO, force_kernel's default
ERROR_ARGUMENT = -1  # the status of a refused argument; other negative ones are CUDA or internal
_ERROR_LEN = 1024

_c_int, _c_i64, _c_u32, _c_double, _c_void_p = (
    ctypes.c_int, ctypes.c_int64, ctypes.c_uint32, ctypes.c_double, ctypes.c_void_p)


class PrefillArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", _c_u32), ("dtype", _c_int), ("head_dim", _c_int),
        ("q", _c_void_p), ("k", _c_void_p), ("v", _c_void_p), ("out", _c_void_p),
        ("cu_seqlens_q", _c_void_p), ("cu_seqlens_k", _c_void_p),
        ("batch", _c_int), ("total_q", _c_i64), ("total_k", _c_i64),
        ("max_seqlen_q", _c_int), ("max_seqlen_k", _c_int),
        ("num_heads_q", _c_int), ("num_heads_kv", _c_int), ("causal", _c_int),
        ("softmax_scale", _c_double), ("kv_order", _c_int),
        ("table_rows", _c_int), ("table_bins", _c_void_p), ("table_scales", _c_void_p),
        ("flat_lambda", _c_double), ("stats", _c_void_p), ("force_kernel", _c_int),
        ("window", _c_int),
        ("k_pages", _c_void_p), ("v_pages", _c_void_p), ("num_pages", _c_i64),
        ("page_size", _c_int), ("page_table", _c_void_p), ("max_pages_per_seq", _c_int),
        ("lambdas", _c_void_p), ("lse", _c_void_p),
    ]


class DecodeArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", _c_u32), ("dtype", _c_int), ("head_dim", _c_int),
        ("q", _c_void_p), ("out", _c_void_p),
        ("k_pages", _c_void_p), ("v_pages", _c_void_p), ("num_pages", _c_i64),
        ("page_size", _c_int), ("page_table", _c_void_p), ("max_pages_per_seq", _c_int),
        ("seq_lens", _c_void_p), ("batch", _c_int), ("max_seq_len", _c_int),
        ("num_heads_q", _c_int), ("num_heads_kv", _c_int), ("softmax_scale", _c_double),
        ("table_rows", _c_int), ("table_bins", _c_void_p), ("table_scales", _c_void_p),
        ("flat_lambda", _c_double), ("num_splits", _c_int),
        ("workspace", _c_void_p), ("workspace_bytes", _c_i64), ("stats", _c_void_p),
        ("force_kernel", _c_int), ("window", _c_int), ("q_len", _c_int),
        ("lambdas", _c_void_p), ("lse", _c_void_p),
    ]


class SkipSoftmaxError(ValueError):
    """An argument the library refuses (SKIPSOFTMAX_ERROR_ARGUMENT)."""


class SkipSoftmaxCudaError(RuntimeError):
    """A CUDA error inside the library, or an internal one."""


def _library_path() -> pathlib.Path:
    env = os.environ.get("SKIPSOFTMAX_LIBRARY")
    if env:
        path = pathlib.Path(env)
        if not path.is_file():
            raise OSError(f"SKIPSOFTMAX_LIBRARY={env}: no such file")
        return path
    here = pathlib.Path(__file__).resolve().parent
    found = sorted(here.glob("libskipsoftmax_capi.so*"))
    if not found:
        raise OSError(
            f"libskipsoftmax_capi.so is not in {here}: install the package with pip (which builds "
            "it) or point SKIPSOFTMAX_LIBRARY at a build tree's libskipsoftmax_capi.so")
    return found[0]


_lock = threading.Lock()
_lib = None


def library() -> ctypes.CDLL:
    """The loaded library, its entry points typed; loaded once."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = _library_path()
        lib = ctypes.CDLL(str(path))
        lib.skipsoftmax_version.restype = ctypes.c_char_p
        version = lib.skipsoftmax_version().decode()
        major_minor = tuple(int(x) for x in version.split(".")[:2])
        if major_minor != API_VERSION:
            raise OSError(f"{path} is version {version}; this package needs "
                          f"{API_VERSION[0]}.{API_VERSION[1]}.x")
        args_p = {"prefill": ctypes.POINTER(PrefillArgs), "decode": ctypes.POINTER(DecodeArgs)}
        err = (ctypes.c_char_p, _c_int)
        for name, argtypes, restype in [
            ("skipsoftmax_prefill_args_init", [args_p["prefill"]], None),
            ("skipsoftmax_decode_args_init", [args_p["decode"]], None),
            ("skipsoftmax_prefill", [args_p["prefill"], _c_void_p, *err], _c_int),
            ("skipsoftmax_prefill_reference", [args_p["prefill"], *err], _c_int),
            ("skipsoftmax_prefill_can_implement", [args_p["prefill"], *err], _c_int),
            ("skipsoftmax_decode", [args_p["decode"], _c_void_p, *err], _c_int),
            ("skipsoftmax_decode_reference", [args_p["decode"], *err], _c_int),
            ("skipsoftmax_decode_workspace_size",
             [args_p["decode"], ctypes.POINTER(_c_int), *err], _c_i64),
            ("skipsoftmax_diffusion_config_load",
             [ctypes.c_char_p, ctypes.c_char_p, _c_int, ctypes.POINTER(_c_void_p), *err], _c_int),
            ("skipsoftmax_diffusion_lambda", [_c_void_p, ctypes.c_char_p, _c_i64, _c_double],
             _c_double),
            ("skipsoftmax_diffusion_config_messages", [_c_void_p, ctypes.c_char_p, _c_int], _c_int),
            ("skipsoftmax_diffusion_config_free", [_c_void_p], None),
        ]:
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = restype
        _lib = lib
        return lib


def version() -> str:
    return library().skipsoftmax_version().decode()


def prefill_args() -> PrefillArgs:
    a = PrefillArgs()
    library().skipsoftmax_prefill_args_init(ctypes.byref(a))
    return a


def decode_args() -> DecodeArgs:
    a = DecodeArgs()
    library().skipsoftmax_decode_args_init(ctypes.byref(a))
    return a


def call(fn_name: str, *args) -> int:
    """Calls an entry point that returns a status (or a size); raises on a negative one."""
    error = ctypes.create_string_buffer(_ERROR_LEN)
    status = getattr(library(), fn_name)(*args, error, _ERROR_LEN)
    if status < 0:
        message = error.value.decode(errors="replace")
        if status == ERROR_ARGUMENT:
            raise SkipSoftmaxError(message)
        raise SkipSoftmaxCudaError(message)
    return status
