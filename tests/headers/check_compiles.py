#!/usr/bin/env python3
"""Compiles, front end only, the translation units that the build defines but does not build: one
per public header (each including that header alone: a header that leans on an include it does not
make fails) and one per benchmark (a benchmark that no longer compiles against the library fails).

Each check is a pure function of the compiler, its command and the preprocessed text of the unit,
so a check whose key (the SHA-256 of those three, with the source and build folders replaced by
placeholders) is recorded in the manifest passed before and is not compiled again. The manifest is
a file in the source tree (tests/headers/compile_checks.sha256); every run writes the complete one
for the current tree beside the build, and says when it differs, so that it is recorded with the
change that made it differ. A unit the manifest does not know is compiled, however old.

Usage: check_compiles.py --commands BUILD/compile_commands.json --source-dir ROOT --build-dir BUILD
         --manifest ROOT/tests/headers/compile_checks.sha256 --write BUILD/compile_checks.sha256
         [--jobs N] [--all] PATTERN...
PATTERN: a substring of a unit's path (relative to ROOT or BUILD) that selects it.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys


def load_manifest(path):
    known = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                digest, name = line.split(maxsplit=1)
                known[name] = digest
    return known


def front_end_command(entry):
    """The entry's compile command without -c, -o OUTPUT and the dependency-file flags, for x86-64-v3."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MT", "-MF", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    # Last, so they win over the build's -march=native: the preprocessed text, and so the key, must
    # not depend on the CPU (-mtune=native would define the CPU's macros).
    return out + ["-march=x86-64-v3", "-mtune=generic"]


def normalize(text, source_dir, build_dir):
    """The text with the build and source folders (whole path components) as placeholders."""
    for folder, placeholder in ((build_dir, "<build>"), (source_dir, "<source>")):
        text = re.sub(re.escape(str(folder)) + r'(?=[/"\\\s]|$)', placeholder, text)
    return text


def check(entry, known, source_dir, build_dir, compiler_id, force):
    """(name, digest, passed, cached, message) for one unit."""
    source = pathlib.Path(entry["file"])
    name = normalize(str(source), source_dir, build_dir)
    command = front_end_command(entry)
    cwd = entry["directory"]
    src_index = max(i for i, a in enumerate(command) if a.endswith(source.name))
    pre = command[:src_index] + ["-E", "-P"] + command[src_index:]
    run = subprocess.run(pre, cwd=cwd, capture_output=True, text=True)
    if run.returncode != 0:
        return name, None, False, False, run.stderr
    h = hashlib.sha256()
    for part in (compiler_id, normalize(" ".join(command), source_dir, build_dir),
                 normalize(run.stdout, source_dir, build_dir)):
        h.update(part.encode())
        h.update(b"\0")
    digest = h.hexdigest()
    if not force and known.get(name) == digest:
        return name, digest, True, True, ""
    run = subprocess.run(command + ["-fsyntax-only"], cwd=cwd, capture_output=True, text=True)
    return name, digest, run.returncode == 0, False, run.stderr


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--commands", required=True, type=pathlib.Path)
    p.add_argument("--source-dir", required=True, type=pathlib.Path)
    p.add_argument("--build-dir", required=True, type=pathlib.Path)
    p.add_argument("--manifest", required=True, type=pathlib.Path)
    p.add_argument("--write", required=True, type=pathlib.Path)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--all", action="store_true", help="compile every unit, whatever the manifest says")
    p.add_argument("patterns", nargs="+")
    a = p.parse_args()
    source_dir, build_dir = a.source_dir.resolve(), a.build_dir.resolve()

    entries = [e for e in json.loads(a.commands.read_text())
               if any(pat in normalize(e["file"], source_dir, build_dir) for pat in a.patterns)]
    if not entries:
        print(f"check_compiles: no unit of {a.commands} matches {a.patterns}", file=sys.stderr)
        return 1
    compiler = front_end_command(entries[0])[0]
    compiler_id = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    known = load_manifest(a.manifest)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = list(pool.map(lambda e: check(e, known, source_dir, build_dir, compiler_id, a.all), entries))

    failed = [r for r in results if not r[2]]
    for name, _, _, _, message in failed:
        print(f"FAILED {name}\n{message}")
    cached = sum(1 for r in results if r[3])
    fresh = {r[0]: r[1] for r in results if r[2]}
    print(f"{len(results)} units: {len(results) - cached} compiled, {cached} unchanged since "
          f"{a.manifest.name} recorded them, {len(failed)} failed")
    a.write.write_text("".join(f"{d}  {n}\n" for n, d in sorted(fresh.items())))
    if not failed and fresh != known:
        print(f"{a.manifest} is not this tree's: record it with\n  cp {a.write} {a.manifest}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
