"""The ctypes binding against the library it loads: the structs' layout (the init functions write
their size and defaults at the binding's offsets), the version check, the error path."""

import ctypes

import pytest

from skipsoftmax import _capi


def test_structs_match_the_library():
    lib = _capi.library()
    assert _capi.version().split(".")[:2] == [str(x) for x in _capi.API_VERSION]
    prefill, decode = _capi.prefill_args(), _capi.decode_args()
    assert prefill.struct_size == ctypes.sizeof(_capi.PrefillArgs)
    assert decode.struct_size == ctypes.sizeof(_capi.DecodeArgs)
    assert (prefill.dtype, prefill.head_dim, prefill.force_kernel) == (_capi.BF16, 128, _capi.AUTO)
    assert (prefill.causal, prefill.kv_order, prefill.max_pages_per_seq) == (1, 2, 0)
    assert (decode.q_len, decode.num_splits, decode.workspace_bytes, decode.force_kernel) == \
        (1, 0, 0, _capi.AUTO)
    # The last field of each struct is where the library expects it: a struct one field short
    # is refused by size.
    short = _capi.prefill_args()
    short.struct_size -= 4
    with pytest.raises(_capi.SkipSoftmaxError, match="struct_size"):
        _capi.call("skipsoftmax_prefill_can_implement", ctypes.byref(short))
    assert lib is _capi.library()


def test_a_missing_library_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("SKIPSOFTMAX_LIBRARY", str(tmp_path / "nothing.so"))
    with pytest.raises(OSError, match="nothing.so: no such file"):
        _capi._library_path()
