#!/usr/bin/env python3
"""Writes include/accel/io/ggml_iq_grids.hpp: the code-point grids of ggml's lattice IQ types.

    scripts/make_iq_grids.py LLAMA_CPP_DIR [OUT]

Run by hand, not by the build, with a Python that has numpy; the header it writes is committed
(rerun it against a newer llama.cpp to confirm the grids, and commit the header if they changed).

The grids (IQ2_XXS 256 points of 8 coordinates, IQ2_XS 512x8, IQ2_S 1024x8, IQ3_XXS 256x4, IQ3_S
512x4, IQ1_S and IQ1_M 2048x8) are selections, not a rule, so they are read out of llama.cpp's own
reference: LLAMA_CPP_DIR/gguf-py/gguf/quants.py is imported (its package __init__ is skipped: it
needs sentencepiece) and each type's dequantizer is run on probe blocks, one block per code point:
f16 scale 1, every sign bit and sub-block scale zero, the point's index in the block's first slot.
The block's first point comes back as its first 8 values (4 for IQ3); divided by the scale the
format gives that sub-block (1/8 for IQ2, 1/4 for IQ3_XXS, 1 for IQ3_S and IQ1) and, for IQ1, less
its delta (+1/8), they are the point's coordinates. Every coordinate must be an entry of the
format's small code book (BOOKS below) and every entry must occur; IQ1_M must give IQ1_S's grid.
Where the checkout has ggml/src/ggml-common.h, its C tables are parsed as a second witness and
must give the same grids.

Each point is written as one uint16: coordinate j is book[(p >> (bits * j)) & mask], 2 bits a
coordinate for the 3-entry books (IQ2, IQ1), 3 for the 8-entry ones (IQ3). The books are written
padded to a power of two so every code indexes inside them.
"""

import hashlib
import os
import re
import struct
import sys
import types

QK_K = 256

# The format's code books: the values one coordinate takes (ggml's grid bytes; IQ1's are int8).
BOOKS = {
    "iq2": (8, 25, 43),
    "iq3xxs": (4, 12, 20, 28, 36, 44, 52, 62),
    "iq3s": (1, 3, 5, 7, 9, 11, 13, 15),
    "iq1": (-1, 0, 1),
}

F16_ONE = 0x3C00


def import_quants(llama_dir):
    """gguf-py's quants module, imported without the package's __init__ (which pulls in vocab)."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        sys.exit("make_iq_grids.py needs numpy (Debian's python3-numpy, for /usr/bin/python3)")
    pkg_dir = os.path.join(llama_dir, "gguf-py", "gguf")
    if not os.path.isfile(os.path.join(pkg_dir, "quants.py")):
        sys.exit(f"no gguf-py/gguf/quants.py under {llama_dir}")
    pkg = types.ModuleType("gguf")
    pkg.__path__ = [pkg_dir]
    sys.modules["gguf"] = pkg
    from gguf import constants, quants  # noqa: E402

    return constants, quants, os.path.join(pkg_dir, "quants.py")


# One probe block per index: (type name, points, coordinates a point, block builder, scale, shift).
# The builder returns the block's bytes with `i` in the first slot; a value v of the first point
# reads back as coordinate (v / scale) - shift.
def probe_iq2_xxs(i):
    # d, then group 0's two words: four 8-bit point indices, then signs and the 4-bit scale (0).
    return struct.pack("<HB", F16_ONE, i) + bytes(63)


def probe_iq2_xs(i):
    # d, then 32 uint16 (9-bit index, 7-bit sign index), then eight scale bytes.
    return struct.pack("<HH", F16_ONE, i) + bytes(62 + 8)


def probe_iq2_s(i):
    # d, qs[64] (index low bits, then the sign bytes), qh[8] (two high bits per point), scales[8].
    qs = bytes([i & 0xFF]) + bytes(63)
    qh = bytes([i >> 8]) + bytes(7)
    return struct.pack("<H", F16_ONE) + qs + qh + bytes(8)


def probe_iq3_xxs(i):
    # d, 64 point indices, then eight words of signs and 4-bit scales.
    return struct.pack("<HB", F16_ONE, i) + bytes(63 + 32)


def probe_iq3_s(i):
    # d, qs[64] (index low bits), qh[8] (ninth bits), signs[32], scales[4].
    qs = bytes([i & 0xFF]) + bytes(63)
    qh = bytes([i >> 8]) + bytes(7)
    return struct.pack("<H", F16_ONE) + qs + qh + bytes(32 + 4)


def probe_iq1_s(i):
    # d, qs[32] (index low bits), qh[8] uint16 (3 high bits per point, scale in bits 12-14, delta's sign in 15).
    qs = bytes([i & 0xFF]) + bytes(31)
    qh = struct.pack("<H", i >> 8) + bytes(14)
    return struct.pack("<H", F16_ONE) + qs + qh


def probe_iq1_m(i):
    # qs[32], qh[16] (3 high bits and the delta's sign per point), scales as four uint16 whose top
    # nibbles are the f16 scale's four nibbles, low to high.
    qs = bytes([i & 0xFF]) + bytes(31)
    qh = bytes([i >> 8]) + bytes(15)
    sc = [((F16_ONE >> (4 * k)) & 0xF) << 12 for k in range(4)]
    return qs + qh + struct.pack("<4H", *sc)


PROBES = [
    # name, ggml type, points, coordinates, probe, scale of the first sub-block, shift, book
    ("iq2xxs_grid", "IQ2_XXS", 256, 8, probe_iq2_xxs, 0.125, 0.0, "iq2"),
    ("iq2xs_grid", "IQ2_XS", 512, 8, probe_iq2_xs, 0.125, 0.0, "iq2"),
    ("iq2s_grid", "IQ2_S", 1024, 8, probe_iq2_s, 0.125, 0.0, "iq2"),
    ("iq3xxs_grid", "IQ3_XXS", 256, 4, probe_iq3_xxs, 0.25, 0.0, "iq3xxs"),
    ("iq3s_grid", "IQ3_S", 512, 4, probe_iq3_s, 1.0, 0.0, "iq3s"),
    ("iq1s_grid", "IQ1_S", 2048, 8, probe_iq1_s, 1.0, 0.125, "iq1"),
    ("iq1s_grid", "IQ1_M", 2048, 8, probe_iq1_m, 1.0, 0.125, "iq1"),
]


def derive(constants, quants, qtype_name, points, coords, probe, scale, shift):
    """The grid as a list of coordinate tuples, read back from the reference dequantizer."""
    import numpy as np

    qtype = getattr(constants.GGMLQuantizationType, qtype_name)
    block_size, type_size = constants.GGML_QUANT_SIZES[qtype]
    assert block_size == QK_K
    raw = b"".join(probe(i) for i in range(points))
    assert len(raw) == points * type_size, (qtype_name, len(raw), type_size)
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(points, type_size)
    values = np.asarray(quants.dequantize(blocks, qtype), dtype=np.float32).reshape(points, QK_K)
    grid = []
    for i in range(points):
        point = []
        for v in values[i, :coords]:
            c = float(v) / scale - shift
            if c != round(c):
                sys.exit(f"{qtype_name} point {i}: value {float(v)} is not a coordinate times {scale}")
            point.append(int(round(c)))
        grid.append(tuple(point))
    return grid


def parse_c_table(common_h, name, points, coords, signed):
    """ggml-common.h's table `name` as coordinate tuples, or None when it is not there."""
    with open(common_h) as f:
        text = f.read()
    m = re.search(r"GGML_TABLE_BEGIN\(\s*uint(\d+)_t\s*,\s*" + name + r"\s*,[^)]*\)(.*?)GGML_TABLE_END", text, re.S)
    if not m:
        return None
    width = int(m.group(1)) // 8
    words = [int(w, 16) for w in re.findall(r"0x[0-9a-fA-F]+", m.group(2))]
    if len(words) != points or width != coords:
        sys.exit(f"{common_h}: {name} has {len(words)} words of {width} bytes")
    fmt = "<%d%s" % (coords, "b" if signed else "B")
    return [struct.unpack(fmt, w.to_bytes(width, "little")) for w in words]


def pack(grid, book):
    bits = 2 if len(book) <= 4 else 3
    words = []
    for point in grid:
        w = 0
        for j, c in enumerate(point):
            w |= book.index(c) << (bits * j)
        words.append(w)
    return bits, words


def hex_grid(name, words):
    """A grid as one string of four hex digits a point, decoded at compile time: the compact form
    of a table of data, one line, as gguf-py keeps it."""
    text = "".join(f"{v:04x}" for v in words)
    return f'inline constexpr auto {name} = grid_from_hex<{len(words)}>(\n    "{text}");'


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split("\n\n")[1])
    llama_dir = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(here, "..", "include", "accel", "io", "ggml_iq_grids.hpp")
    constants, quants, quants_py = import_quants(llama_dir)
    with open(quants_py, "rb") as f:
        quants_sha = hashlib.sha256(f.read()).hexdigest()
    common_h = os.path.join(llama_dir, "ggml", "src", "ggml-common.h")
    has_c = os.path.isfile(common_h)

    grids = {}
    for name, qtype, points, coords, probe, scale, shift, book_name in PROBES:
        grid = derive(constants, quants, qtype, points, coords, probe, scale, shift)
        book = BOOKS[book_name]
        used = {c for point in grid for c in point}
        if not used <= set(book):
            sys.exit(f"{qtype}: coordinates {sorted(used - set(book))} are not in the code book {book}")
        if used != set(book):
            sys.exit(f"{qtype}: the code book entries {sorted(set(book) - used)} never occur")
        if len(set(grid)) != points:
            sys.exit(f"{qtype}: the grid's points are not distinct")
        if name in grids:
            if grids[name][0] != grid:
                sys.exit(f"{qtype}: its grid differs from {grids[name][2]}'s")
            continue
        if has_c:
            c_grid = parse_c_table(common_h, name, points, coords, signed=book_name == "iq1")
            if c_grid is None:
                sys.exit(f"{common_h}: no table {name}")
            if [tuple(p) for p in c_grid] != grid:
                sys.exit(f"{qtype}: gguf-py's dequantizer and ggml-common.h's {name} differ")
        grids[name] = (grid, book_name, qtype)

    version = "?"
    pyproject = os.path.join(llama_dir, "gguf-py", "pyproject.toml")
    if os.path.isfile(pyproject):
        with open(pyproject) as f:
            m = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.M)
            version = m.group(1) if m else version

    body = []
    for book_name, book in BOOKS.items():
        bits = 2 if len(book) <= 4 else 3
        padded = list(book) + [0] * ((1 << bits) - len(book))
        ctype = "std::int8_t" if min(book) < 0 else "std::uint8_t"
        unused = f"  // codes {len(book)}.. unused" if len(padded) > len(book) else ""
        body.append(f"inline constexpr {ctype} {book_name}_book[{len(padded)}] = {{"
                    + ", ".join(str(v) for v in padded) + "};" + unused)
    body.append("")
    for name, (grid, book_name, qtype) in grids.items():
        bits, words = pack(grid, BOOKS[book_name])
        body.append(f"// {qtype}{' and IQ1_M' if qtype == 'IQ1_S' else ''}: {len(grid)} points of "
                    f"{len(grid[0])} coordinates, {bits} bits each, through {book_name}_book.")
        body.append(hex_grid(name, words))
        body.append("")

    witness = ("\n// ggml/src/ggml-common.h's C tables agree." if has_c else "")
    header = f"""\
// ggml's lattice IQ code-point grids, one std::uint16_t a point (stored as four hex digits a
// point, one string a grid, decoded at compile time): coordinate j of point p is
// book[(p >> (bits * j)) & (2^bits - 1)], bits 2 for the three-value books and 3 for the eight.
//
// GENERATED by scripts/make_iq_grids.py from llama.cpp's gguf-py {version} (gguf/quants.py,
// sha256 {quants_sha[:16]}...): its reference dequantizers run on one probe block per code point.{witness}
// Do not edit; rerun the script (its docstring says how). io/ggml_dequantize.hpp reads these.
//
//   iq2_book, iq3xxs_book, iq3s_book, iq1_book    the values one coordinate takes
//   iq2xxs_grid[256], iq2xs_grid[512], iq2s_grid[1024]    IQ2_XXS, IQ2_XS, IQ2_S (8 coordinates)
//   iq3xxs_grid[256], iq3s_grid[512]                      IQ3_XXS, IQ3_S (4 coordinates)
//   iq1s_grid[2048]                                       IQ1_S and IQ1_M (8 coordinates)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace accel::io::ggml_iq {{

/// N points from 4N hex digits, four a point, most significant first (evaluated at compile time).
template <std::size_t N>
consteval std::array<std::uint16_t, N> grid_from_hex(const char (&hex)[4 * N + 1]) {{
  std::array<std::uint16_t, N> out{{}};
  for (std::size_t p = 0; p < N; ++p) {{
    unsigned w = 0;
    for (std::size_t k = 0; k < 4; ++k) {{
      const char c = hex[4 * p + k];
      w = 16 * w + static_cast<unsigned>(c <= '9' ? c - '0' : c - 'a' + 10);
    }}
    out[p] = static_cast<std::uint16_t>(w);
  }}
  return out;
}}

{chr(10).join(body)}
}}  // namespace accel::io::ggml_iq
"""
    with open(out, "w") as f:
        f.write(header)
    print(f"wrote {out}: {', '.join(f'{n} {len(g[0])}' for n, g in grids.items())}"
          f"{' (checked against ggml-common.h)' if has_c else ''}")


if __name__ == "__main__":
    main()
