"""Issue 29 items 1 and 3 through the Python wrapper: close() while another thread is inside compile()
waits for it (it was a heap use-after-free), a file that is not a cache is refused, and cache trouble is
visible as Runtime.cache_status. Needs the built library ($QATTN_LIBRARY) but no GPU."""
import os
import subprocess
import sys
import textwrap

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PYTHON_DIR)

import qattn  # noqa: E402

SPEC = "prefill qk=fp16 pv=fp16 out=fp16 d=64 arch=sm_80"

needs_library = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY"),
                                   reason="QATTN_LIBRARY is not set (path to <build>/runtime/libqattn.so)")


@needs_library
def test_close_while_a_compile_is_in_flight_waits_for_it(tmp_path):
    # In a child process: the failure this guards against is a segmentation fault, which must fail the
    # test rather than take pytest down with it.
    code = textwrap.dedent(f"""
        import sys, threading, time
        import qattn
        rt = qattn.Runtime(cache_path={str(tmp_path / "c.db")!r})
        outcome = {{}}
        def work():
            try:
                outcome["name"] = rt.compile({SPEC!r})
            except qattn.QattnError as e:
                outcome["error"] = e
        worker = threading.Thread(target=work)
        worker.start()
        deadline = time.time() + 30
        # Wait until the compile is inside the C call (NVRTC takes seconds), then close under it.
        while getattr(rt, "_in_flight", 1) == 0 and time.time() < deadline:
            time.sleep(0.001)
        time.sleep(0.2)
        rt.close()
        assert rt.closed
        worker.join(120)
        assert not worker.is_alive(), "compile never returned"
        if "error" in outcome:
            assert isinstance(outcome["error"], qattn.BadInput), repr(outcome["error"])
        else:
            assert outcome["name"].startswith("qattn_prefill"), outcome
        try:
            rt.compile({SPEC!r})
            raise SystemExit("a closed runtime accepted a call")
        except qattn.BadInput as e:
            assert "closed" in str(e)
        print("ok", "name" in outcome)
    """)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.startswith("ok"), result.stdout


@needs_library
def test_close_from_several_threads_at_once_frees_once(tmp_path):
    import threading
    rt = qattn.Runtime(cache_path=str(tmp_path / "c.db"))
    threads = [threading.Thread(target=rt.close) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert rt.closed


@needs_library
def test_a_file_that_is_not_a_cache_is_refused_and_left_alone(tmp_path):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    with pytest.raises(qattn.BadInput, match="not a qattn cache"):
        qattn.Runtime(cache_path=str(notes))
    assert notes.read_text() == '{"mine": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.json"]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(qattn.BadInput, match="FIFO"):
        qattn.Runtime(cache_path=str(fifo))


@needs_library
def test_cache_status_shows_cache_trouble(tmp_path, monkeypatch):
    with qattn.Runtime(cache_path=str(tmp_path / "ok.db")) as rt:
        assert rt.cache_status == ""
    monkeypatch.setenv("QATTN_SHIPPED_CACHE", str(tmp_path / "missing-shipped.db"))
    with qattn.Runtime(cache_path=str(tmp_path / "ok2.db")) as rt:
        status = rt.cache_status
        assert "missing-shipped.db" in status and "\n" not in status, status
