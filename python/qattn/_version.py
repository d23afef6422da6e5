"""The package's version, from the one source of truth, the project(qattn VERSION ...) of CMakeLists.txt:
copied into _build_info.py by the wheel's build backend, into _installed.py by `cmake --install`, and
read straight from the checkout's CMakeLists.txt when the package runs from python/."""
import os
import re

from . import _search

_PROJECT = re.compile(r"^\s*project\s*\(\s*qattn\b[^)]*?\bVERSION\s+([0-9][0-9.]*)", re.MULTILINE | re.IGNORECASE)


def package_version(package=None):
    """The version string, or None where none of the three sources is there."""
    package = package or _search.package_dir()
    for generated in ("_build_info.py", "_installed.py"):
        path = os.path.join(package, generated)
        if os.path.isfile(path):
            version = _search.constants(path).get("VERSION")
            if version:
                return version
    cmakelists = os.path.join(os.path.dirname(os.path.dirname(package)), "CMakeLists.txt")
    if os.path.basename(os.path.dirname(package)) == "python" and os.path.isfile(cmakelists):
        with open(cmakelists, encoding="utf-8", errors="replace") as f:
            match = _PROJECT.search(f.read())
        if match:
            return match.group(1)
    return None
