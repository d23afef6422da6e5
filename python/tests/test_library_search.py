"""The library search order of qattn/_search.py and the errors of qattn/_library.load(), on fake package
and checkout folders (no real library needed; CPU only)."""
import os
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PYTHON_DIR)

from qattn import _library, _search  # noqa: E402
from qattn._version import package_version  # noqa: E402


def touch(path, data=b""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


@pytest.fixture
def checkout(tmp_path):
    """<tmp>/repo: a qattn checkout (CMakeLists.txt, python/qattn) with nothing built."""
    repo = tmp_path / "repo"
    touch(str(repo / "CMakeLists.txt"), b"cmake_minimum_required(VERSION 3.24)\nproject(qattn VERSION 7.8.9 LANGUAGES C CXX)\n")
    package = repo / "python" / "qattn"
    touch(str(package / "__init__.py"))
    return repo, str(package)


def files(candidates):
    return [(c.rule, c.path) for c in candidates if not c.by_name]


def test_variable_is_the_only_candidate_file_or_folder(tmp_path, checkout):
    repo, package = checkout
    touch(os.path.join(package, "lib", "libqattn.so"))
    lib = touch(str(tmp_path / "mine" / "libqattn.so"))
    assert files(_search.candidates({"QATTN_LIBRARY": lib}, package)) == [("$QATTN_LIBRARY", lib)]
    assert files(_search.candidates({"QATTN_LIBRARY": str(tmp_path / "mine")}, package)) == [("$QATTN_LIBRARY", lib)]
    # Empty means unset, as before.
    assert files(_search.candidates({"QATTN_LIBRARY": ""}, package))[0][0] == "bundled"


def test_full_order_bundled_prefix_repository_then_system(checkout):
    repo, package = checkout
    # Installed by cmake --install: _installed.py names the prefix's library relative to the package.
    touch(os.path.join(package, "_installed.py"), b'LIBRARY = "../../lib/libqattn.so.0"\nVERSION = "7.8.9"\n')
    for build in ("build-zeta", "build-debug", "build", "build-alpha", "build-release"):
        touch(str(repo / build / "lib" / "libqattn.so"))
    found = _search.candidates({}, package)
    rules = [c.rule for c in found]
    # Without the variable the other rules appear in the documented order, each as one block.
    assert [r for i, r in enumerate(rules) if i == 0 or rules[i - 1] != r] == list(_search.RULES[1:])
    assert files(found) == [
        ("bundled", os.path.join(package, "lib", "libqattn.so")),
        ("bundled", os.path.join(package, "libqattn.so")),
        ("install prefix", str(repo / "lib" / "libqattn.so.0")),
        ("repository build", str(repo / "build" / "lib" / "libqattn.so")),
        ("repository build", str(repo / "build-release" / "lib" / "libqattn.so")),
        ("repository build", str(repo / "build-debug" / "lib" / "libqattn.so")),
        ("repository build", str(repo / "build-alpha" / "lib" / "libqattn.so")),
        ("repository build", str(repo / "build-zeta" / "lib" / "libqattn.so")),
    ]
    assert found[-1] == _search.Candidate("system loader", "libqattn.so", True)


def test_no_repository_rule_outside_a_checkout(tmp_path):
    site = tmp_path / "venv" / "lib" / "python3" / "site-packages"
    package = str(site / "qattn")
    touch(os.path.join(package, "__init__.py"))
    touch(str(tmp_path / "venv" / "lib" / "build" / "lib" / "libqattn.so"))   # not a checkout's build
    assert [rule for rule, _ in files(_search.candidates({}, package))] == ["bundled", "bundled"]


@pytest.fixture
def fresh_load(monkeypatch, checkout):
    """load() as in a new process, with this fake package instead of the real one."""
    _, package = checkout
    monkeypatch.setattr(_library, "_loaded", None)
    monkeypatch.setattr(_library, "_loaded_path", None)
    monkeypatch.setattr(_library, "_loaded_rule", None)
    monkeypatch.setattr(_search, "package_dir", lambda: package)
    monkeypatch.setattr(_search, "_system_names", lambda: [])
    monkeypatch.delenv("QATTN_LIBRARY", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", "/nonexistent")
    return checkout


def test_wrong_variable_is_an_error_naming_it(fresh_load, monkeypatch, tmp_path):
    repo, _ = fresh_load
    touch(str(repo / "build" / "lib" / "libqattn.so"))   # would be found without the variable
    monkeypatch.setenv("QATTN_LIBRARY", str(tmp_path / "typo"))
    with pytest.raises(_search.WrongLibraryVariable, match=r"QATTN_LIBRARY=.*typo names no library"):
        _library.load()
    assert _library.loaded_from() is None


def test_nothing_found_lists_every_place_tried(fresh_load):
    repo, package = fresh_load
    with pytest.raises(OSError) as info:
        _library.load()
    message = str(info.value)
    assert message.startswith("libqattn.so not found. Looked in, in order:")
    for place in (os.path.join(package, "lib", "libqattn.so"), os.path.join(package, "libqattn.so"),
                  str(repo / "build" / "lib" / "libqattn.so"), str(repo / "build-debug" / "lib" / "libqattn.so")):
        assert f"{place} (no such file)" in message
    assert "system loader: libqattn.so (" in message
    assert "QATTN_LIBRARY=<build>/lib/libqattn.so" in message


def test_a_broken_file_fails_instead_of_falling_back(fresh_load):
    repo, package = fresh_load
    touch(os.path.join(package, "lib", "libqattn.so"), b"not an ELF file")
    touch(str(repo / "build" / "lib" / "libqattn.so"), b"would be next")
    with pytest.raises(OSError, match=r"cannot load .*qattn/lib/libqattn.so \(found by rule 'bundled'\)"):
        _library.load()


def test_bundled_is_chosen_over_the_repository_build(fresh_load):
    repo, package = fresh_load
    bundled = os.path.join(package, "lib", "libqattn.so")
    touch(bundled, b"not an ELF file")
    touch(str(repo / "build" / "lib" / "libqattn.so"), b"not an ELF file either")
    # The first existing file is the one load() opens: the error names the bundled copy, not the build.
    with pytest.raises(OSError) as info:
        _library.load()
    assert bundled in str(info.value) and "/build/" not in str(info.value)


def test_version_sources_in_order(checkout):
    repo, package = checkout
    assert package_version(package) == "7.8.9"                     # the checkout's CMakeLists.txt
    touch(os.path.join(package, "_installed.py"), b'LIBRARY = "x"\nVERSION = "7.8.10"\n')
    assert package_version(package) == "7.8.10"                    # cmake --install's
    touch(os.path.join(package, "_build_info.py"), b'VERSION = "7.8.11"\n')
    assert package_version(package) == "7.8.11"                    # the wheel's


def test_version_unknown_outside_a_checkout(tmp_path):
    package = str(tmp_path / "site-packages" / "qattn")
    touch(os.path.join(package, "__init__.py"))
    assert package_version(package) is None
