"""The pip package: the in-tree build backend (python/build_backend/qattn_build.py), the wheel it writes,
and the wheel installed in a fresh venv, imported and checked by `python -m qattn doctor` with a clean
environment. CPU only and fast: the library is the one under test ($QATTN_LIBRARY, bundled through
QATTN_PREBUILT_LIBRARY) or a fake file, never a CMake build of its own. The CMake path runs against a fake
`cmake` here; QATTN_TEST_WHEEL_CMAKE=1 adds a real `pip wheel` that builds the library (minutes; in
$QATTN_BUILD_DIR when set, with $CMAKE_ARGS, e.g. ccache launchers).
"""
import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(PYTHON_DIR)
sys.path.insert(0, os.path.join(PYTHON_DIR, "build_backend"))

import qattn_build  # noqa: E402

with open(os.path.join(REPO, "CMakeLists.txt")) as _f:
    VERSION = re.search(r"project\(qattn VERSION ([0-9.]+)", _f.read()).group(1)

needs_library = pytest.mark.skipif(not os.environ.get("QATTN_LIBRARY"),
                                   reason="QATTN_LIBRARY is not set (path to <build>/lib/libqattn.so)")


def has_pip():
    return subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0


needs_pip = pytest.mark.skipif(not has_pip(), reason=f"{sys.executable} has no pip (Debian: python3-pip)")


@pytest.fixture
def fake_library(tmp_path):
    path = tmp_path / "prebuilt" / "libqattn.so"
    path.parent.mkdir()
    path.write_bytes(b"\x7fELF fake library bytes")
    return str(path)


def build_directly(tmp_path, monkeypatch, library, source_dir=PYTHON_DIR):
    monkeypatch.chdir(source_dir)
    monkeypatch.setenv("QATTN_PREBUILT_LIBRARY", library)
    out = tmp_path / "direct"
    name = qattn_build.build_wheel(str(out))
    return out / name


def test_wheel_holds_the_package_the_library_and_a_valid_record(tmp_path, monkeypatch, fake_library):
    wheel = build_directly(tmp_path, monkeypatch, fake_library)
    tag = qattn_build.platform_tag()
    assert wheel.name == f"qattn-{VERSION}-py3-none-{tag}.whl" and tag.startswith("linux_")
    dist_info = f"qattn-{VERSION}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        modules = sorted(n[len("qattn/"):] for n in names if n.startswith("qattn/") and n.endswith(".py"))
        in_tree = sorted(os.path.relpath(os.path.join(d, f), os.path.join(PYTHON_DIR, "qattn")).replace(os.sep, "/")
                         for d, _, fs in os.walk(os.path.join(PYTHON_DIR, "qattn")) if "__pycache__" not in d
                         for f in fs if f.endswith(".py"))
        assert modules == sorted(in_tree + ["_build_info.py"])
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
        with open(fake_library, "rb") as f:
            assert archive.read("qattn/lib/libqattn.so") == f.read()
        assert stat.S_IMODE(archive.getinfo("qattn/lib/libqattn.so").external_attr >> 16) == 0o755
        metadata = archive.read(f"{dist_info}/METADATA").decode()
        assert "Name: qattn\n" in metadata and f"Version: {VERSION}\n" in metadata
        assert f"Tag: py3-none-{tag}\n" in archive.read(f"{dist_info}/WHEEL").decode()
        assert "Root-Is-Purelib: false\n" in archive.read(f"{dist_info}/WHEEL").decode()
        assert archive.read(f"{dist_info}/top_level.txt") == b"qattn\n"
        info = archive.read("qattn/_build_info.py").decode()
        assert f"VERSION = '{VERSION}'" in info and "QATTN_PREBUILT_LIBRARY" in info
        rows = list(csv.reader(io.StringIO(archive.read(f"{dist_info}/RECORD").decode())))
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path == f"{dist_info}/RECORD":
                assert digest == "" and size == ""
                continue
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data)), path


def test_root_and_python_folder_build_the_same_wheel(tmp_path, monkeypatch, fake_library):
    from_python = build_directly(tmp_path / "a", monkeypatch, fake_library, PYTHON_DIR).read_bytes()
    from_root = build_directly(tmp_path / "b", monkeypatch, fake_library, REPO).read_bytes()
    assert from_python == from_root


def test_metadata_hook_matches_the_wheel(tmp_path, monkeypatch, fake_library):
    monkeypatch.chdir(PYTHON_DIR)
    dist_info = qattn_build.prepare_metadata_for_build_wheel(str(tmp_path / "meta"))
    assert dist_info == f"qattn-{VERSION}.dist-info"
    wheel = build_directly(tmp_path, monkeypatch, fake_library)
    with zipfile.ZipFile(wheel) as archive:
        assert (tmp_path / "meta" / dist_info / "METADATA").read_bytes() == archive.read(f"{dist_info}/METADATA")
    assert qattn_build.get_requires_for_build_wheel() == []


def test_no_repository_is_a_one_line_error(tmp_path, monkeypatch, fake_library):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("QATTN_PREBUILT_LIBRARY", fake_library)
    with pytest.raises(qattn_build.BuildError) as info:
        qattn_build.build_wheel(str(tmp_path / "out"))
    assert "no qattn repository above" in str(info.value.code) and "\n" not in str(info.value.code)


def test_missing_prebuilt_library_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.chdir(PYTHON_DIR)
    monkeypatch.setenv("QATTN_PREBUILT_LIBRARY", str(tmp_path / "nowhere" / "libqattn.so"))
    with pytest.raises(qattn_build.BuildError, match=r"QATTN_PREBUILT_LIBRARY=.*nowhere/libqattn.so: no such file"):
        qattn_build.build_wheel(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


FAKE_CMAKE = """#!/bin/sh
echo "$@" >> "{log}"
echo "fake cmake output line"
case "$*" in
  *--build*) [ -n "$FAIL_BUILD" ] && {{ echo "error: the compiler failed"; exit 3; }}
             mkdir -p "$2/lib" && printf 'built' > "$2/lib/libqattn.so.9" && ln -sf libqattn.so.9 "$2/lib/libqattn.so" ;;
esac
exit 0
"""


@pytest.fixture
def fake_cmake(tmp_path, monkeypatch):
    """A `cmake` first on PATH that records its arguments and 'builds' a library."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "cmake-calls.txt"
    script = bin_dir / "cmake"
    script.write_text(FAKE_CMAKE.format(log=log))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("QATTN_PREBUILT_LIBRARY", raising=False)
    monkeypatch.setenv("QATTN_BUILD_DIR", str(tmp_path / "wheel-build"))
    monkeypatch.setenv("CUDA_HOME", "/opt/some-cuda")
    monkeypatch.setenv("CMAKE_BUILD_PARALLEL_LEVEL", "3")
    monkeypatch.setenv("CMAKE_ARGS", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DEXTRA='a b'")
    monkeypatch.chdir(REPO)
    return log


def test_cmake_build_configures_the_library_alone(tmp_path, fake_cmake):
    name = qattn_build.build_wheel(str(tmp_path / "out"))
    configure, build = fake_cmake.read_text().splitlines()
    build_dir = str(tmp_path / "wheel-build")
    assert configure.startswith(f"-S {REPO} -B {build_dir} -DCMAKE_BUILD_TYPE=Release")
    for option in ("-DQATTN_BUILD_TESTS=OFF", "-DQATTN_BUILD_EXAMPLES=OFF", "-DQATTN_BUILD_BENCH=OFF",
                   "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCUDAToolkit_ROOT=/opt/some-cuda",
                   "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DEXTRA=a b"):
        assert option in configure
    assert build == f"--build {build_dir} --target qattn -j 3"
    with zipfile.ZipFile(tmp_path / "out" / name) as archive:
        assert archive.read("qattn/lib/libqattn.so") == b"built"   # the file, not the symlink
        assert "cmake: " in archive.read("qattn/_build_info.py").decode()


def test_cmake_failure_prints_the_log_tail_and_one_line(tmp_path, fake_cmake, monkeypatch, capsys):
    monkeypatch.setenv("FAIL_BUILD", "1")
    with pytest.raises(qattn_build.BuildError) as info:
        qattn_build.build_wheel(str(tmp_path / "out"))
    log = tmp_path / "wheel-build" / "qattn-wheel-build.log"
    assert info.value.message == (f"CMake build failed in {tmp_path / 'wheel-build'}; the log's last lines are "
                                  f"above, all of it in {log}")
    assert "error: the compiler failed" in capsys.readouterr().err
    assert "error: the compiler failed" in log.read_text()


def test_missing_cmake_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("QATTN_PREBUILT_LIBRARY", raising=False)
    monkeypatch.setenv("QATTN_BUILD_DIR", str(tmp_path / "wheel-build"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(qattn_build.BuildError, match="cannot run cmake.*is CMake installed"):
        qattn_build.build_wheel(str(tmp_path / "out"))


# -- through pip, offline ------------------------------------------------------------------------------
def pip(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "pip", *args, "--no-index", "--no-cache-dir",
                           "--disable-pip-version-check"], capture_output=True, text=True, env=env, cwd=cwd)


@needs_pip
@pytest.mark.parametrize("source, isolation", [(PYTHON_DIR, True), (REPO, False)], ids=["python-isolated", "root"])
def test_pip_builds_the_wheel_offline(tmp_path, monkeypatch, fake_library, source, isolation):
    # requires = [] makes an isolated build need nothing from an index either.
    env = dict(os.environ, QATTN_PREBUILT_LIBRARY=fake_library)
    result = pip("wheel", "--no-deps", *([] if isolation else ["--no-build-isolation"]), "-w", str(tmp_path / "pip"),
                 source, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    built = list((tmp_path / "pip").iterdir())
    assert [w.name for w in built] == [f"qattn-{VERSION}-py3-none-{qattn_build.platform_tag()}.whl"]
    assert built[0].read_bytes() == build_directly(tmp_path, monkeypatch, fake_library).read_bytes()


@needs_pip
def test_pip_shows_the_backend_error_without_a_traceback(tmp_path):
    env = dict(os.environ, QATTN_PREBUILT_LIBRARY=str(tmp_path / "missing.so"))
    result = pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "pip"), PYTHON_DIR, env=env)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"qattn build backend: QATTN_PREBUILT_LIBRARY={tmp_path / 'missing.so'}: no such file" in output
    assert "Traceback" not in output


# -- installed into a fresh venv, used with a clean environment ----------------------------------------------
@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv (system site packages: pytest/torch stay visible) with the wheel of the library under test."""
    if not os.environ.get("QATTN_LIBRARY"):
        pytest.skip("QATTN_LIBRARY is not set (path to <build>/lib/libqattn.so)")
    if not has_pip():
        pytest.skip(f"{sys.executable} has no pip (Debian: python3-pip)")
    root = tmp_path_factory.mktemp("packaging")
    env = dict(os.environ, QATTN_PREBUILT_LIBRARY=os.environ["QATTN_LIBRARY"])
    assert pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "wheel"), PYTHON_DIR,
               env=env).returncode == 0
    wheel = next((root / "wheel").iterdir())
    python = make_venv(root / "venv")
    installed = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir",
                                "--disable-pip-version-check", str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python, clean_environment(root / "home"), root


def make_venv(prefix):
    """A venv with system site packages (pytest/torch stay visible); returns its python."""
    python = str(prefix / "bin" / "python")
    # Without its own pip the venv is made in milliseconds; the system pip (a system site package)
    # installs into it. A Python whose pip is not visible there gets one by ensurepip.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(prefix)], check=True)
    if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(prefix)], check=True)
    return python


def clean_environment(home):
    """No QATTN_*, PYTHONPATH or LD_LIBRARY_PATH: what a user's shell has after the install."""
    home.mkdir(exist_ok=True)
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    for kept in ("LD_PRELOAD", "ASAN_OPTIONS"):   # a sanitizer build's runtime (tests/CMakeLists.txt)
        if kept in os.environ:
            clean[kept] = os.environ[kept]
    return clean


def run_in(venv, *args, **extra_env):
    python, clean, root = venv
    return subprocess.run([python, *args], capture_output=True, text=True, cwd=str(root),
                          env=dict(clean, **extra_env))


def test_installed_package_loads_its_bundled_library(venv):
    code = ("import qattn, qattn._library as l; qattn.version(); "
            "print(qattn.__file__, qattn.__version__, qattn.version(), *l.loaded_from(), sep='|')")
    result = run_in(venv, "-c", code)
    assert result.returncode == 0, result.stderr
    path, package_version, library_version, library, rule = result.stdout.strip().split("|")
    site = os.path.dirname(os.path.dirname(path))
    assert site.startswith(str(venv[2] / "venv")) and site.endswith("site-packages")
    assert package_version == library_version == VERSION
    assert (library, rule) == (os.path.join(site, "qattn", "lib", "libqattn.so"), "bundled")


def test_doctor_in_the_venv(venv):
    text = run_in(venv, "-m", "qattn", "doctor")
    as_json = run_in(venv, "-m", "qattn", "doctor", "--json")
    report = json.loads(as_json.stdout)
    # No GPU (CI): compile-only, 1; on a machine with a driver and a device, 0.
    assert text.returncode == as_json.returncode == report["exit_code"] == (0 if report["driver"]["ok"] else 1)
    assert report["library"]["rule"] == "bundled" and report["library_version"]["matches"]
    assert report["package"]["version"] == VERSION and report["nvrtc"]["ok"]
    assert report["cache"]["path"] == os.path.join(venv[1]["HOME"], ".cache", "qattn", "qattn.db")
    assert not report["cache"]["exists"] and not os.path.exists(report["cache"]["path"])   # left alone
    lines = text.stdout.splitlines()
    assert lines[0] == f"package:          qattn {VERSION} at {os.path.dirname(os.path.dirname(report['library']['path']))}"
    assert f"library:          {report['library']['path']} (found by rule: bundled)" in lines
    assert f"library version:  {VERSION} (matches the package)" in lines
    assert lines[-1] == f"result:           {report['verdict']} (exit code {report['exit_code']})"
    if not report["driver"]["ok"]:
        assert report["verdict"] == "usable for compile-only work (no GPU)"


def test_doctor_says_broken_for_a_wrong_variable(venv):
    result = run_in(venv, "-m", "qattn", "doctor", QATTN_LIBRARY="/nonexistent/libqattn.so")
    assert result.returncode == 2
    assert "NOT LOADED: QATTN_LIBRARY=/nonexistent/libqattn.so names no library" in result.stdout


def test_version_command_in_the_venv(venv):
    result = run_in(venv, "-m", "qattn", "version")
    assert (result.returncode, result.stdout) == (0, f"qattn {VERSION} (library {VERSION})\n")
    assert run_in(venv, "-m", "qattn", "--help").stdout.startswith("usage: python -m qattn")


def copy_checkout(tmp_path):
    """The parts of this checkout the backend and the package need, in <tmp>/repo."""
    repo = tmp_path / "repo"
    shutil.copytree(os.path.join(PYTHON_DIR, "qattn"), repo / "python" / "qattn",
                    ignore=shutil.ignore_patterns("__pycache__", "lib"))
    shutil.copytree(os.path.join(PYTHON_DIR, "build_backend"), repo / "python" / "build_backend",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(PYTHON_DIR, "pyproject.toml"), repo / "python")
    shutil.copy(os.path.join(REPO, "CMakeLists.txt"), repo)
    return repo


def test_editable_links_the_library_into_the_checkout(tmp_path, monkeypatch, fake_library):
    repo = copy_checkout(tmp_path)
    monkeypatch.chdir(repo / "python")
    monkeypatch.setenv("QATTN_PREBUILT_LIBRARY", fake_library)
    name = qattn_build.build_editable(str(tmp_path / "out"))
    assert name == f"qattn-{VERSION}-py3-none-{qattn_build.platform_tag()}.whl"
    link = repo / "python" / "qattn" / "lib" / "libqattn.so"
    assert os.readlink(link) == fake_library
    with zipfile.ZipFile(tmp_path / "out" / name) as archive:
        assert archive.read("__editable__.qattn.pth").decode() == f"{repo / 'python'}\n"
        assert not [n for n in archive.namelist() if n.startswith("qattn/")]


@needs_library
@needs_pip
def test_editable_install_imports_the_checkout(tmp_path):
    repo = copy_checkout(tmp_path)
    python, clean = make_venv(tmp_path / "venv"), clean_environment(tmp_path / "home")
    env = dict(clean, QATTN_PREBUILT_LIBRARY=os.environ["QATTN_LIBRARY"])
    installed = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir",
                                "--disable-pip-version-check", "--no-build-isolation", "--force-reinstall",
                                "-e", str(repo / "python")], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    code = "import qattn, qattn._library as l; qattn.version(); print(qattn.__file__, *l.loaded_from(), sep='|')"
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, env=clean, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    module, library, rule = result.stdout.strip().split("|")
    assert module == str(repo / "python" / "qattn" / "__init__.py")
    assert (library, rule) == (str(repo / "python" / "qattn" / "lib" / "libqattn.so"), "bundled")


@pytest.mark.skipif(os.environ.get("QATTN_TEST_WHEEL_CMAKE") != "1",
                    reason="QATTN_TEST_WHEEL_CMAKE=1 runs pip wheel with a real CMake build (minutes)")
def test_pip_wheel_builds_the_library_with_cmake(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("QATTN_PREBUILT_LIBRARY", "QATTN_LIBRARY")}
    env.setdefault("QATTN_BUILD_DIR", str(tmp_path / "build"))   # a given one (e.g. with ccache) is reused
    result = pip("wheel", "--no-deps", "-w", str(tmp_path / "pip"), PYTHON_DIR, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    with zipfile.ZipFile(next((tmp_path / "pip").iterdir())) as archive:
        assert "LIBRARY_SOURCE = 'cmake: " in archive.read("qattn/_build_info.py").decode()
        library = tmp_path / "libqattn.so"
        library.write_bytes(archive.read("qattn/lib/libqattn.so"))
    code = ("import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); l.qattn_version.restype = ctypes.c_char_p; "
            "print(l.qattn_version().decode())")
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}   # no LD_LIBRARY_PATH: the RUNPATH finds libnvrtc
    loaded = subprocess.run([sys.executable, "-c", code, str(library)], capture_output=True, text=True, env=clean)
    assert loaded.stdout.strip() == VERSION, loaded.stderr
