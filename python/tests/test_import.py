"""CPU-only smoke test of the qattn package: import without torch or GPU, then (with $QATTN_LIBRARY set)
the compile-only path through the real library.

    QATTN_LIBRARY=build/lib/libqattn.so PYTHONPATH=python python3 -m pytest -q python/tests
"""
import os
import subprocess
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PYTHON_DIR)

import qattn  # noqa: E402
from qattn import layout  # noqa: E402

VALID_SPEC = "prefill qk=int8:per_token pv=int8:per_channel out=fp16 d=128 causal smooth=k arch=sm_90a"
BAD_SPEC = "prefill qk=int9:per_token pv=int8:per_channel out=fp16 d=128 arch=sm_90a"

needs_library = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY"),
                                   reason="QATTN_LIBRARY is not set (path to <build>/lib/libqattn.so)")


def test_import_pulls_in_neither_torch_nor_the_library():
    code = ("import sys, qattn; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert qattn._library._loaded is None, 'library loaded at import'; "
            "print(qattn.Runtime.__name__)")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, QATTN_LIBRARY="/nonexistent/libqattn.so")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Runtime"


def test_missing_library_names_the_path(monkeypatch):
    monkeypatch.setattr(qattn._library, "_loaded", None)
    monkeypatch.setenv("QATTN_LIBRARY", "/nonexistent/libqattn.so")
    with pytest.raises(OSError, match="/nonexistent/libqattn.so"):
        qattn.Runtime(use_cache=False)


def test_exceptions_form_a_hierarchy_with_the_message():
    err = qattn.BadInput("unknown format 'int9'", "qattn_compile")
    assert isinstance(err, qattn.QattnError) and isinstance(err, ValueError)
    assert err.message == "unknown format 'int9'"
    assert str(err) == "qattn_compile: unknown format 'int9'"
    assert issubclass(qattn.NoGpu, qattn.QattnError) and not issubclass(qattn.NoGpu, qattn.BadInput)


def test_layout_strides_of_bshd_and_bhsd():
    # A [2, 5, 3, 64] bshd tensor viewed with padded rows: strides (1600, 320, 80, 1) in elements.
    dims, strides = layout.decompose("q", (2, 5, 3, 64), (1600, 320, 80, 1), "bshd")
    assert dims == (2, 5, 3, 64) and strides == (1600, 80, 320)
    dims, strides = layout.decompose("q", (2, 3, 5, 64), (960, 320, 64, 1), "bhsd")
    assert dims == (2, 5, 3, 64) and strides == (960, 320, 64)


def test_layout_rejects_what_the_c_side_cannot_see():
    with pytest.raises(qattn.BadInput, match="stride 2"):
        layout.decompose("k", (1, 4, 2, 64), (1024, 256, 128, 2), "bshd")
    with pytest.raises(qattn.BadInput, match="accepted: bshd, bhsd"):
        layout.decompose("q", (1, 4, 2, 64), (512, 128, 64, 1), "sbhd")
    with pytest.raises(qattn.BadInput, match="spec says d=128"):
        layout.check_problem(VALID_SPEC, (1, 4, 2, 64), (1, 4, 2, 64), (1, 4, 2, 64))
    with pytest.raises(qattn.BadInput, match="spec says out=fp16"):
        layout.check_dtype(VALID_SPEC, "bfloat16")
    with pytest.raises(qattn.BadInput, match="must match"):
        layout.check_problem(VALID_SPEC, (1, 4, 2, 128), (1, 8, 2, 128), (1, 7, 2, 128))


def test_layout_leaves_gqa_to_the_c_side():
    shape = layout.check_problem(VALID_SPEC, (2, 7, 8, 128), (2, 9, 2, 128), (2, 9, 2, 128))
    assert shape == dict(batch=2, heads_q=8, heads_kv=2, q_len=7, kv_len=9)


@needs_library
def test_bad_spec_raises_bad_input_with_the_message(tmp_path):
    with qattn.Runtime(cache_path=str(tmp_path / "qattn.db")) as rt:
        with pytest.raises(qattn.BadInput) as info:
            rt.compile(BAD_SPEC)
    assert "int9" in info.value.message, info.value.message
    assert info.value.call == "qattn_compile"


@needs_library
def test_compile_for_sm_90a_returns_the_kernel_name(tmp_path):
    with qattn.Runtime(cache_path=str(tmp_path / "qattn.db")) as rt:
        name = rt.compile(VALID_SPEC)
        assert name.startswith("qattn_prefill_sm90a"), name
        assert "causal" in name, name
        # A second compile of the same spec names the same kernel (served from the cache).
        assert rt.compile(VALID_SPEC) == name
    assert qattn.version()
