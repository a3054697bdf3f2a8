#!/usr/bin/env python3
"""Fails when a header includes a layer below its own (docs/design.md: each layer only uses the ones above it).

Usage: check_layers.py INCLUDE_DIR. Prints every offending include with its file and line.
"""
import pathlib
import re
import sys

ORDER = ["core", "backend", "policy", "ops", "nested", "nn", "models", "tokenize", "io", "plan", "hooks", "dispatch",
         "quant", "dist", "utils", "engine"]
# Quoted and angle-bracket includes alike: a header cannot reach a later layer either way.
INCLUDE = re.compile(r'^\s*#\s*include\s+["<]accel/([a-z_]+)/')


def main() -> int:
    root = pathlib.Path(sys.argv[1]) / "accel"
    rank = {layer: i for i, layer in enumerate(ORDER)}
    bad = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".hpp", ".cuh") or path.parent == root:
            continue  # the umbrella header includes everything by design
        layer = path.relative_to(root).parts[0]
        if layer not in rank:
            bad.append(f"{path}: folder '{layer}' is not a layer of docs/design.md ({', '.join(ORDER)})")
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if m and rank.get(m.group(1), -1) > rank[layer]:
                bad.append(f"{path}:{number}: layer '{layer}' includes '{m.group(1)}', which comes after it")
    for b in bad:
        print(b)
    print(f"{len(bad)} layering violation(s)" if bad else "layers include only the layers above them")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
