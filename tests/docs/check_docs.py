#!/usr/bin/env python3
"""Checks the user documentation against the tree it describes.

  check_docs.py links --repo DIR
      every relative link in README.md, docs/**/*.md and bench/**/*.md names an existing file or folder;
      README.md is at most 300 lines and the docs carry no "session N" / "issue N" history; every
      bench/results/ folder is dated and has a manifest.md (command, commit, device, date, a committed script).
  check_docs.py quickstarts --repo DIR --lib LIBQATTN --cli QATTN --work DIR
      extracts README.md's fenced blocks tagged `quickstart` (cpp, c, python, sh), builds the C and C++ ones
      against the library, runs each, and checks its exit code: 0, or 3 (no GPU) where none can be used.

Exit 0 when everything holds; otherwise one line per problem on stderr and exit 1.
"""
import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys

FENCE = re.compile(r"^```(\w+) quickstart\s*\n(.*?)^```\s*$", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def doc_files(repo):
    files = [os.path.join(repo, "README.md")]
    for top in ("docs", "bench"):
        for root, _, names in os.walk(os.path.join(repo, top)):
            files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return files


def check_links(repo):
    problems, checked = [], 0
    for path in doc_files(repo):
        text = open(path, encoding="utf-8").read()
        text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)   # links inside code blocks are code
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue   # a URL, or an anchor in the same file
            file_part = target.split("#", 1)[0]
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            checked += 1
            if not os.path.exists(resolved):
                problems.append(f"{os.path.relpath(path, repo)}: link to {target}: no such file")
    return problems, checked


def check_manual(repo):
    """README.md stays a short manual, and the docs carry no work-log history."""
    problems = []
    lines = open(os.path.join(repo, "README.md"), encoding="utf-8").read().count("\n")
    if lines > 300:
        problems.append(f"README.md: {lines} lines; a user's manual stays within 300 (move detail to docs/)")
    history = re.compile(r"\b(session \d+|issue #?\d+)\b", re.I)
    for path in doc_files(repo):
        if os.sep + "results" + os.sep in path:
            continue   # result files quote their own commands
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            m = history.search(line)
            if m:
                problems.append(f"{os.path.relpath(path, repo)}:{n}: '{m.group(0)}': history belongs in git, not the docs")
    return problems


def check_results(repo):
    """Every folder of bench/results/ has a manifest naming its command, commit, device, date and a
    committed script (a link the link check resolves)."""
    problems = []
    results = os.path.join(repo, "bench", "results")
    for name in sorted(os.listdir(results)):
        folder = os.path.join(results, name)
        if not os.path.isdir(folder):
            continue
        if not re.match(r"^\d{4}-\d{2}-\d{2}_", name):
            problems.append(f"bench/results/{name}: not a dated folder (YYYY-MM-DD_<what>)")
        manifest = os.path.join(folder, "manifest.md")
        if not os.path.exists(manifest):
            problems.append(f"bench/results/{name}: no manifest.md")
            continue
        text = open(manifest, encoding="utf-8").read()
        for field in ("command", "commit", "device", "date"):
            if not re.search(r"^\|\s*" + field + r"s?\s*\|", text, re.M):
                problems.append(f"bench/results/{name}/manifest.md: no '{field}' row")
        targets = [os.path.relpath(os.path.normpath(os.path.join(folder, t.split("#", 1)[0])), repo)
                   for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]
        scripts = [t for t in targets if re.match(r"^(bench|scripts|examples|cli)/", t) and
                   not t.startswith("bench/results")]
        if not scripts:
            problems.append(f"bench/results/{name}/manifest.md: names no committed script (a link into bench/, "
                            "scripts/, examples/ or cli/)")
    return problems


def driver_present():
    try:
        ctypes.CDLL(os.environ.get("QATTN_LIBCUDA", "libcuda.so.1"))
        return True
    except OSError:
        return False


def torch_cuda_present():
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def run(cmd, env, cwd, timeout):
    print("$ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    sys.stdout.write(done.stdout)
    sys.stdout.write(done.stderr)
    return done.returncode


SKIP = "skip"   # check_quickstarts' answer when a prerequisite is missing: exit 77 (ctest SKIP_RETURN_CODE)


def check_quickstarts(repo, lib, cli, work, cuda_include, cuda_lib):
    blocks = FENCE.findall(open(os.path.join(repo, "README.md"), encoding="utf-8").read())
    langs = [lang for lang, _ in blocks]
    problems = []
    for wanted in ("cpp", "c", "python", "sh"):
        if langs.count(wanted) != 1:
            problems.append(f"README.md: expected one ```{wanted} quickstart block, found {langs.count(wanted)}")
    if problems:
        return problems
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    libdir = os.path.dirname(os.path.abspath(lib))
    env = dict(os.environ)
    env["QATTN_CACHE_DIR"] = os.path.join(work, "cache")   # never the user's cache
    env["LD_LIBRARY_PATH"] = os.pathsep.join([libdir, cuda_lib, env.get("LD_LIBRARY_PATH", "")])
    env["PATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(cli)), env.get("PATH", "")])
    env["PYTHONPATH"] = os.path.join(repo, "python")
    env["QATTN_LIBRARY"] = os.path.abspath(lib)
    gpu = driver_present()
    link = ["-L", libdir, "-lqattn", "-L", cuda_lib, "-lcudart", "-Wl,-rpath," + libdir + ":" + cuda_lib]
    # As the README's build lines: the public headers and the build tree's copy of qattn/abi.h.
    includes = ["-I", os.path.join(repo, "include"), "-I", os.path.join(os.path.dirname(libdir), "include"),
                "-I", cuda_include]
    compilers = {"cpp": (os.environ.get("CXX", "c++"), ["-std=c++17"], "quickstart.cpp"),
                 "c": (os.environ.get("CC", "cc"), ["-std=c11", "-Wall", "-Werror"], "quickstart.c")}
    have_cudart = os.path.exists(os.path.join(cuda_include, "cuda_runtime_api.h")) and any(
        n.startswith("libcudart.so") for n in (os.listdir(cuda_lib) if os.path.isdir(cuda_lib) else []))
    skipped = []
    for lang, code in blocks:
        if lang in compilers and not have_cudart:
            skipped.append(lang)   # the C and C++ quick starts allocate with the CUDA runtime
            continue
        name = {"cpp": "quickstart.cpp", "c": "quickstart.c", "python": "quickstart.py", "sh": "quickstart.sh"}[lang]
        source = os.path.join(work, name)
        with open(source, "w", encoding="utf-8") as f:
            f.write(code)
        if lang in compilers:
            compiler, flags, _ = compilers[lang]
            exe = os.path.join(work, "quickstart_" + lang)
            if run([compiler, *flags, source, *includes, *link, "-o", exe], env, work, 600) != 0:
                problems.append(f"README.md ```{lang} quickstart: does not compile")
                continue
            cmd = [exe]
        elif lang == "python":
            cmd = [sys.executable, source]
        else:
            cmd = ["bash", "-e", source]
        rc = run(cmd, env, work, 600)
        # Exit 3 (no GPU) is right only where no GPU can be used: no driver, or (Python) no CUDA PyTorch.
        may_lack_gpu = not gpu or (lang == "python" and not torch_cuda_present())
        allowed = (0, 3) if may_lack_gpu else (0,)
        print(f"-> {lang} quick start exit {rc} (accepted: {allowed})", flush=True)
        if rc not in allowed:
            problems.append(f"README.md ```{lang} quickstart: exit {rc}, expected {' or '.join(map(str, allowed))}")
    if skipped and not problems:
        print(f"skipped the {', '.join(skipped)} quick starts: no CUDA runtime (cuda_runtime_api.h, libcudart) in "
              f"{cuda_include} / {cuda_lib}", file=sys.stderr)
        return [SKIP]
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["links", "quickstarts"])
    ap.add_argument("--repo", required=True)
    ap.add_argument("--lib")
    ap.add_argument("--cli")
    ap.add_argument("--work")
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    ap.add_argument("--cuda-include", default=os.path.join(cuda, "include"), help="where cuda_runtime_api.h is")
    ap.add_argument("--cuda-lib", default=os.path.join(cuda, "lib64"), help="where libcudart.so is")
    args = ap.parse_args()
    args.repo = os.path.abspath(args.repo)
    if args.mode == "links":
        problems, checked = check_links(args.repo)
        print(f"{checked} relative links checked")
        problems += check_manual(args.repo) + check_results(args.repo)
    else:
        if not (args.lib and args.cli and args.work):
            ap.error("quickstarts needs --lib, --cli and --work")
        problems = check_quickstarts(args.repo, args.lib, args.cli, args.work, args.cuda_include, args.cuda_lib)
    if problems == [SKIP]:
        return 77
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
