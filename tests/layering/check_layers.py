#!/usr/bin/env python3
"""Fails when a header includes a layer below its own (docs/design.md: each layer only uses the ones above it),
and, inside the quant layer, a room after its own or another scheme's quantizer (quant/quant.hpp lists the rooms).

Usage: check_layers.py INCLUDE_DIR. Prints every offending include with its file and line.
"""
import pathlib
import re
import sys

ORDER = ["core", "backend", "policy", "ops", "nested", "nn", "models", "tokenize", "io", "plan", "hooks", "dispatch",
         "quant", "dist", "utils", "engine"]
# Quoted and angle-bracket includes alike: a header cannot reach a later layer either way.
INCLUDE = re.compile(r'^\s*#\s*include\s+["<]accel/([a-z_]+)/')
QUANT_INCLUDE = re.compile(r'^\s*#\s*include\s+["<]accel/quant/([a-z_0-9]+)/([a-z_0-9]+)')
QUANT_ROOMS = ["formats", "config", "kernels", "layers", "quantizers"]
# One file per scheme in quant/quantizers/: none includes another's (the registry includes them all).
SCHEMES = {"bnb", "quanto", "torchao", "gguf"}


def quant_room_violations(path, parts, text):
    """A quant header's includes of a later room, or of another scheme's quantizer."""
    room = parts[1] if len(parts) > 2 else None
    if room is None:
        return []  # quant/quant.hpp, the layer's umbrella
    if room not in QUANT_ROOMS:
        return [f"{path}: folder 'quant/{room}' is not a room of quant/quant.hpp ({', '.join(QUANT_ROOMS)})"]
    own = pathlib.PurePath(parts[-1]).stem
    bad = []
    for number, line in enumerate(text.splitlines(), 1):
        m = QUANT_INCLUDE.match(line)
        if not m:
            continue
        target, name = m.group(1), m.group(2)
        if target in QUANT_ROOMS and QUANT_ROOMS.index(target) > QUANT_ROOMS.index(room):
            bad.append(f"{path}:{number}: quant room '{room}' includes room '{target}', which comes after it")
        if room == target == "quantizers" and own in SCHEMES and name in SCHEMES and name != own:
            bad.append(f"{path}:{number}: the {own} quantizer includes the {name} quantizer's file")
    return bad


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
        text = path.read_text()
        if layer == "quant":
            bad += quant_room_violations(path, path.relative_to(root).parts, text)
        for number, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if m and rank.get(m.group(1), -1) > rank[layer]:
                bad.append(f"{path}:{number}: layer '{layer}' includes '{m.group(1)}', which comes after it")
    for b in bad:
        print(b)
    print(f"{len(bad)} layering violation(s)" if bad else "layers include only the layers above them")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
