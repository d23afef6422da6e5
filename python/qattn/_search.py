"""Where libqattn.so is looked for, in a fixed order (python/README.md, "Which library is loaded"):

  1. $QATTN_LIBRARY       a file, or a folder holding libqattn.so. When set, nothing else is tried: an
                          explicit choice that is wrong must fail, not fall back to another library.
  2. bundled              the copy inside the installed package, qattn/lib/libqattn.so (pip install),
                          or qattn/libqattn.so placed beside the modules by hand.
  3. install prefix       `cmake --install --prefix P` puts the package in P/share/qattn/python and
                          writes qattn/_installed.py, which names P/lib/libqattn.so.<major> relative to it.
  4. repository build     in a checkout (python/qattn under a CMakeLists.txt): <repo>/build, build-release,
                          build-debug, then every other <repo>/build*/lib (sorted), then <repo>/dev/*/runtime.
  5. system loader        by name through the dynamic loader (LD_LIBRARY_PATH, ldconfig's cache): the name
                          ctypes.util.find_library("qattn") reports, then plain libqattn.so.
"""
import ast
import collections
import glob
import os

LIBRARY_NAME = "libqattn.so"
ENV_VARIABLE = "QATTN_LIBRARY"

RULE_ENV = "$QATTN_LIBRARY"
RULE_BUNDLED = "bundled"
RULE_PREFIX = "install prefix"
RULE_REPOSITORY = "repository build"
RULE_SYSTEM = "system loader"
RULES = (RULE_ENV, RULE_BUNDLED, RULE_PREFIX, RULE_REPOSITORY, RULE_SYSTEM)

# by_name: `path` is a name for the dynamic loader's own search, not a file to check first.
Candidate = collections.namedtuple("Candidate", "rule path by_name")


class WrongLibraryVariable(OSError):
    """$QATTN_LIBRARY names no library file: the explicit choice fails instead of falling back."""


def package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def from_variable(value):
    """The file $QATTN_LIBRARY=value names (a folder means the libqattn.so inside it)."""
    return os.path.join(value, LIBRARY_NAME) if os.path.isdir(value) else value


def constants(path):
    """name -> value of the `NAME = <literal>` lines of a generated module (_installed.py,
    _build_info.py), read without importing it: the search also inspects packages other than this one."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return found


def _installed_library(package):
    """Rule 3: the library of the prefix that `cmake --install` put this package in, or None."""
    path = os.path.join(package, "_installed.py")
    if not os.path.isfile(path):
        return None
    library = constants(path).get("LIBRARY")
    return os.path.normpath(os.path.join(package, library)) if library else None


def _repository_builds(package):
    """Rule 4: a checkout's build folders, when this package is python/qattn of a qattn checkout."""
    repo = os.path.dirname(os.path.dirname(package))
    if os.path.basename(os.path.dirname(package)) != "python" or \
            not os.path.isfile(os.path.join(repo, "CMakeLists.txt")):
        return []
    paths = [os.path.join(repo, build, "lib", LIBRARY_NAME) for build in ("build", "build-release", "build-debug")]
    paths += sorted(glob.glob(os.path.join(repo, "build*", "lib", LIBRARY_NAME)))
    paths += sorted(glob.glob(os.path.join(repo, "dev", "*", "runtime", LIBRARY_NAME)))
    return paths


def _system_names():
    import ctypes.util
    found = ctypes.util.find_library("qattn")   # e.g. libqattn.so.0 from ldconfig's cache
    return [found] if found and found != LIBRARY_NAME else []


def candidates(environ=None, package=None, system=True):
    """The places to try, in order, as Candidate(rule, path, by_name). With $QATTN_LIBRARY set it is the
    only one. `environ` and `package` default to os.environ and this package's folder (tests pass
    their own); system=False leaves out rule 5 (asking ldconfig costs a subprocess)."""
    environ = os.environ if environ is None else environ
    package = package or package_dir()
    value = environ.get(ENV_VARIABLE)
    if value:
        return [Candidate(RULE_ENV, from_variable(value), False)]
    found = [Candidate(RULE_BUNDLED, os.path.join(package, "lib", LIBRARY_NAME), False),
             Candidate(RULE_BUNDLED, os.path.join(package, LIBRARY_NAME), False)]
    installed = _installed_library(package)
    if installed:
        found.append(Candidate(RULE_PREFIX, installed, False))
    found += [Candidate(RULE_REPOSITORY, p, False) for p in _repository_builds(package)]
    if system:
        found += [Candidate(RULE_SYSTEM, name, True) for name in _system_names() + [LIBRARY_NAME]]
    unique, seen = [], set()
    for c in found:
        if c.path not in seen:
            seen.add(c.path)
            unique.append(c)
    return unique


def candidate_paths():
    """The library files looked for, in order (rules 1-4; the system loader's names are not files)."""
    return [c.path for c in candidates(system=False)]


def not_found_message(tried):
    """One error for a search that loaded nothing; `tried` holds (candidate, why) pairs."""
    lines = [f"{LIBRARY_NAME} not found. Looked in, in order:"]
    lines += [f"  {c.rule}: {c.path} ({why})" for c, why in tried]
    lines.append(f"Install the package with pip (python/README.md), or build the library (cmake --build <build> "
                 f"--target qattn) and set {ENV_VARIABLE}=<build>/lib/{LIBRARY_NAME}")
    return "\n".join(lines)


def wrong_variable_message(value, path):
    return (f"{ENV_VARIABLE}={value} names no library: {path} does not exist (set it to a {LIBRARY_NAME} or a "
            f"folder holding one, or unset it to search the usual places)")
