"""PEP 517 build backend of the qattn Python package: pure Python, no build requirements.

pip runs it from python/pyproject.toml and from the repository's pyproject.toml (both name it through
backend-path), so `pip install ./python` and `pip install .` work offline. The wheel holds python/qattn
and libqattn.so as qattn/lib/libqattn.so, taken from:
  $QATTN_PREBUILT_LIBRARY   an existing libqattn.so, bundled as it is; else
  a CMake build of the repository (target qattn only) in $QATTN_BUILD_DIR or <repo>/build-wheel, with
  CUDAToolkit_ROOT from $CUDA_HOME or /usr/local/cuda, -j from $CMAKE_BUILD_PARALLEL_LEVEL or the CPU
  count, and extra configure arguments from $CMAKE_ARGS (e.g. compiler launchers).
The version is the project(qattn VERSION ...) of the repository's CMakeLists.txt, the library's own.
`pip install -e` links the library into the checkout's python/qattn/lib instead (write_editable_wheel).
"""
import base64
import csv
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile

NAME = "qattn"
SUMMARY = "Quantized attention kernels compiled on demand with NVRTC (ctypes wrapper of libqattn)"
LIBRARY = "libqattn.so"
_PROJECT = re.compile(r"^\s*project\s*\(\s*qattn\b[^)]*?\bVERSION\s+([0-9][0-9.]*)", re.MULTILINE | re.IGNORECASE)


class BuildError(SystemExit):
    """A failure the user can act on. A SystemExit, so that pip's hook runner prints this one line
    instead of a traceback; callers in Python still catch it by this class."""

    def __init__(self, message):
        super().__init__(f"qattn build backend: {message}")
        self.message = message


# -- where things are ------------------------------------------------------------------------------
def find_repository(start=None):
    """The qattn checkout holding `start` (default: the working directory, which PEP 517 makes the
    source tree: the repository root or its python/ folder): the nearest folder upwards whose
    CMakeLists.txt declares project(qattn ...). Returns (root, version)."""
    here = os.path.abspath(start or os.getcwd())
    folder = here
    while True:
        cmakelists = os.path.join(folder, "CMakeLists.txt")
        if os.path.isfile(cmakelists):
            with open(cmakelists, encoding="utf-8", errors="replace") as f:
                match = _PROJECT.search(f.read())
            if match:
                return folder, match.group(1)
        parent = os.path.dirname(folder)
        if parent == folder:
            raise BuildError(f"no qattn repository above {here} (a CMakeLists.txt with project(qattn VERSION ...) "
                             f"is needed for the version and the library); build from a qattn checkout")
        folder = parent


def platform_tag():
    """The wheel's platform tag: the library is native code for this platform; the Python side is
    ctypes only, so any Python 3 and ABI (py3-none)."""
    return re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())


def wheel_name(version):
    return f"{NAME}-{version}-py3-none-{platform_tag()}.whl"


# -- the library -------------------------------------------------------------------------------------
def _prebuilt_library():
    path = os.environ.get("QATTN_PREBUILT_LIBRARY")
    if not path:
        return None
    if os.path.isdir(path):
        path = os.path.join(path, LIBRARY)
    if not os.path.isfile(path):
        raise BuildError(f"QATTN_PREBUILT_LIBRARY={os.environ['QATTN_PREBUILT_LIBRARY']}: no such file "
                         f"(expected a built {LIBRARY}, or a folder holding one)")
    return os.path.realpath(path)


def _run_logged(command, log, what):
    log.write(("$ " + " ".join(shlex.quote(c) for c in command) + "\n").encode())
    log.flush()
    try:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    except OSError as e:
        raise BuildError(f"{what}: cannot run {command[0]}: {e.strerror} (is CMake installed?)") from None
    return code


def _tail(path, lines=40):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace").splitlines()
    return "\n".join(text[-lines:])


def build_library(repo):
    """Configures and builds target qattn with CMake; returns the path of the built library."""
    build = os.path.abspath(os.environ.get("QATTN_BUILD_DIR") or os.path.join(repo, "build-wheel"))
    os.makedirs(build, exist_ok=True)
    cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    configure = ["cmake", "-S", repo, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DQATTN_BUILD_TESTS=OFF", "-DQATTN_BUILD_EXAMPLES=OFF", "-DQATTN_BUILD_BENCH=OFF",
                 # The bundled copy gets the install RUNPATH (the toolkit's library folder, where libnvrtc
                 # is) as built, without the build tree's extra entries: it loads without LD_LIBRARY_PATH
                 # where the toolkit is at the path it was built against.
                 "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
                 f"-DCUDAToolkit_ROOT={cuda}"]
    # A build folder configured before keeps its generator (CMake refuses to switch).
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")) and shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    compile_ = ["cmake", "--build", build, "--target", "qattn", "-j", jobs]
    log_path = os.path.join(build, "qattn-wheel-build.log")
    with open(log_path, "wb") as log:
        for command, what in [(configure, "CMake configure"), (compile_, "CMake build")]:
            print(f"qattn build backend: {what} (log: {log_path})", file=sys.stderr, flush=True)
            if _run_logged(command, log, what) != 0:
                print(_tail(log_path), file=sys.stderr)
                raise BuildError(f"{what} failed in {build}; the log's last lines are above, all of it in "
                                 f"{log_path}")
    built = os.path.join(build, "lib", LIBRARY)
    if not os.path.isfile(built):
        raise BuildError(f"CMake built target qattn but {built} is missing")
    return os.path.realpath(built)


# -- the wheel ------------------------------------------------------------------------------------
def _metadata(version):
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {SUMMARY}\n"
            f"Requires-Python: >=3.8\n").encode()


def _wheel_file(version):
    return (f"Wheel-Version: 1.0\nGenerator: qattn_build {version}\nRoot-Is-Purelib: false\n"
            f"Tag: py3-none-{platform_tag()}\n").encode()


def _dist_info_files(version):
    """name -> bytes of the .dist-info files other than RECORD."""
    return {"METADATA": _metadata(version), "WHEEL": _wheel_file(version), "top_level.txt": f"{NAME}\n".encode()}


def _package_files(repo):
    """(archive name, file path) of python/qattn's files, caches left out."""
    package = os.path.join(repo, "python", NAME)
    if not os.path.isfile(os.path.join(package, "__init__.py")):
        raise BuildError(f"{package}/__init__.py is missing: not a complete qattn checkout")
    files = []
    for folder, dirs, names in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and d != "lib")
        for name in sorted(names):
            # _installed.py belongs to `cmake --install` layouts only (it points at <prefix>/lib).
            if name.endswith((".pyc", ".pyo", ".so")) or name in ("_installed.py", "_build_info.py"):
                continue
            path = os.path.join(folder, name)
            files.append((os.path.relpath(path, os.path.dirname(package)).replace(os.sep, "/"), path))
    return files


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def _build_info(version, source):
    return (f'"""Written into the wheel by the build backend (python/build_backend/qattn_build.py)."""\n'
            f"VERSION = {version!r}\nLIBRARY_SOURCE = {source!r}\n").encode()


def _write_archive(directory, version, entries):
    """Writes the wheel of `entries` ((archive name, bytes, mode) each) plus its .dist-info into
    `directory`; returns its file name."""
    name = wheel_name(version)
    dist_info = f"{NAME}-{version}.dist-info"
    entries = list(entries)
    for file_name, data in _dist_info_files(version).items():
        entries.append((f"{dist_info}/{file_name}", data, 0o644))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for arcname, data, _ in entries:
        writer.writerow(_record_line(arcname, data))
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    entries.append((f"{dist_info}/RECORD", record.getvalue().encode(), 0o644))
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with zipfile.ZipFile(path + ".part", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for arcname, data, mode in entries:
            info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))   # reproducible
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    os.replace(path + ".part", path)
    return name


def write_wheel(directory, repo, version, library, library_source):
    """Writes the wheel of python/qattn with `library` as qattn/lib/libqattn.so; returns its file name."""
    entries = []
    for arcname, path in _package_files(repo):
        with open(path, "rb") as f:
            entries.append((arcname, f.read(), 0o644))
    entries.append((f"{NAME}/_build_info.py", _build_info(version, library_source), 0o644))
    with open(library, "rb") as f:
        entries.append((f"{NAME}/lib/{LIBRARY}", f.read(), 0o755))
    return _write_archive(directory, version, entries)


def write_editable_wheel(directory, repo, version, library):
    """An editable install: a .pth file puts the checkout's python/ on sys.path, and the checkout's
    python/qattn/lib/libqattn.so becomes a symlink to the library (the bundled rule finds it first, and a
    rebuild in the same folder updates it). Returns the wheel's file name."""
    link = os.path.join(repo, "python", NAME, "lib", LIBRARY)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(library, link)
    pth = (os.path.join(repo, "python") + "\n").encode()
    return _write_archive(directory, version, [(f"__editable__.{NAME}.pth", pth, 0o644)])


# -- PEP 517 hooks ------------------------------------------------------------------------------
def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _, version = find_repository()
    dist_info = f"{NAME}-{version}.dist-info"
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    for file_name, data in _dist_info_files(version).items():
        with open(os.path.join(metadata_directory, dist_info, file_name), "wb") as f:
            f.write(data)
    return dist_info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    repo, version = find_repository()
    library = _prebuilt_library()
    source = "QATTN_PREBUILT_LIBRARY" if library else "cmake"
    if library is None:
        library = build_library(repo)
    return write_wheel(wheel_directory, repo, version, library, f"{source}: {library}")


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    repo, version = find_repository()
    library = _prebuilt_library() or build_library(repo)
    return write_editable_wheel(wheel_directory, repo, version, library)


def build_sdist(sdist_directory, config_settings=None):
    raise BuildError("no source distribution: the library is built from the whole repository; "
                     "install from a checkout (pip install ./python or pip install .)")
