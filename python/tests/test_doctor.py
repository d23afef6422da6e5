"""`python -m qattn doctor`'s verdicts and lines, in this process against $QATTN_LIBRARY, with the
machine-dependent checks (driver, version source) replaced where a verdict needs them."""
import json
import os
import subprocess
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PYTHON_DIR)

from qattn import doctor  # noqa: E402

needs_library = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY"),
                                   reason="QATTN_LIBRARY is not set (path to <build>/lib/libqattn.so)")

GPU = {"ok": True, "driver_version": "13.0",
       "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}]}


@pytest.fixture
def home(tmp_path, monkeypatch):
    for variable in ("QATTN_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@needs_library
def test_ready_with_a_driver_and_a_device(monkeypatch, home):
    monkeypatch.setattr(doctor, "check_driver", lambda: GPU)
    report = doctor.run_checks()
    assert (report["exit_code"], report["verdict"]) == (0, "ready for GPU use")
    text = doctor.format_report(report)
    assert "CUDA driver:      13.0, 1 device(s)\n  GPU 0:          NVIDIA H100 80GB HBM3 (compute capability 9.0)" in text
    assert text.endswith("result:           ready for GPU use (exit code 0)")
    json.dumps(report)   # --json prints it as it is


@needs_library
def test_compile_only_without_a_device(monkeypatch, home):
    monkeypatch.setattr(doctor, "check_driver", lambda: {"ok": False, "driver_version": "13.0", "devices": [],
                                                         "error": "the CUDA driver sees no device"})
    report = doctor.run_checks()
    assert report["exit_code"] == 1
    assert "GPU:              the CUDA driver sees no device" in doctor.format_report(report)


@needs_library
def test_another_library_version_is_broken(monkeypatch, home):
    monkeypatch.setattr(doctor, "check_driver", lambda: GPU)
    monkeypatch.setattr(doctor, "package_version", lambda: "9.9.9")
    report = doctor.run_checks()
    assert report["exit_code"] == 2 and not report["library_version"]["matches"]
    assert "(DOES NOT MATCH the package's 9.9.9)" in doctor.format_report(report)


@needs_library
def test_cache_is_read_only_and_follows_the_library_rule(monkeypatch, home):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")   # the XDG spec ignores relative paths
    assert doctor.default_cache_path() == str(home / ".cache" / "qattn" / "qattn.db")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg"))
    assert doctor.default_cache_path() == str(home / "xdg" / "qattn" / "qattn.db")
    monkeypatch.setenv("QATTN_CACHE_DIR", str(home / "mine"))
    path = home / "mine" / "qattn.db"
    assert doctor.default_cache_path() == str(path)
    assert doctor.check_cache()["exists"] is False and not path.exists()
    path.parent.mkdir()
    path.write_bytes(b"this is not a qattn cache")
    result = doctor.check_cache()
    assert result["exists"] and not result["ok"]
    assert path.read_bytes() == b"this is not a qattn cache"


def test_without_a_library_the_exit_code_is_2(home):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, QATTN_LIBRARY=str(home / "none.so"))
    result = subprocess.run([sys.executable, "-m", "qattn", "doctor", "--json"], capture_output=True, text=True,
                            env=env, cwd=str(home))
    report = json.loads(result.stdout)
    assert result.returncode == report["exit_code"] == 2
    assert "names no library" in report["library"]["error"] and "cache" not in report
