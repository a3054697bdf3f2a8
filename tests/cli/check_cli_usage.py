#!/usr/bin/env python3
"""Checks the command lines of `accel` and `accel-conformance`: help, version, and exit codes.

    check_cli_usage.py GROUP ACCEL ACCEL_CONFORMANCE VERSION MODEL   (ACCEL_CONFORMANCE "-" when unused)

GROUP is one of:
    help         `accel --help`, a bare `accel`, `accel --version`, `accel COMMAND --help` / `-h`
                 (anywhere on the line) for every command
    usage        usage errors exit 2 with the command's usage line and a pointer to its --help:
                 unknown option, missing value, flag given a value, missing option or positional,
                 unknown command, options that exclude each other
    bad-input    a missing file and out-of-range or malformed numbers exit 1 with "error:" and a
                 message that names the option and the value
    output       what a file names reaches the terminal escaped (tables, errors), --json stays
                 valid JSON with whole-number bytes, plan labels binary units KiB / MiB, and a
                 budget read as bits ("2mb") is warned about
    conformance  accel-conformance --help, --version, usage errors and an unreadable query file

MODEL is a transformers config.json that `accel plan` can place. Exit codes: 0 success, 1 bad
input or a failed check, 2 usage error.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

COMMANDS = ["estimate-memory", "plan", "inspect"]
failures = []


def run(program, *args):
    p = subprocess.run([program, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def check(what, program, args, rc, stdout=(), stderr=(), not_stderr=()):
    """Runs PROGRAM ARGS; wants exit `rc`, each of `stdout` / `stderr` in that stream, none of `not_stderr`."""
    code, out, err = run(program, *args)
    problems = []
    if code != rc:
        problems.append(f"exit {code}, wanted {rc}")
    problems += [f"stdout lacks {s!r}" for s in stdout if s not in out]
    problems += [f"stderr lacks {s!r}" for s in stderr if s not in err]
    problems += [f"stderr has {s!r}" for s in not_stderr if s in err]
    line = " ".join([program.rsplit("/", 1)[-1], *args])
    if problems:
        failures.append(what)
        print(f"FAIL {what}: {line}\n  " + "\n  ".join(problems) + f"\n  stdout: {out.strip()}\n  stderr: {err.strip()}")
    else:
        print(f"PASS {what}: {line}")


def usage_error(what, accel, command, args, message):
    check(what, accel, [command, *args], 2,
          stderr=[message, f"usage: accel {command}", f"accel {command} --help"])


def group_help(accel, version, model):
    check("the command list", accel, ["--help"], 0,
          stdout=["usage: accel COMMAND", "--version", "exit status", *COMMANDS])
    check("the command list, short", accel, ["-h"], 0, stdout=COMMANDS)
    check("a bare accel is a usage error that lists the commands", accel, [], 2, stderr=COMMANDS)
    check("the version", accel, ["--version"], 0, stdout=[f"accel {version}\n"])
    check("plan --help", accel, ["plan", "--help"], 0,
          stdout=["usage: accel plan MODEL", "--max-memory", "--kv-cache", "--balanced-low-0", "-h, --help"])
    check("--help after other arguments", accel, ["plan", model, "--max-memory", "0=1GB", "--help"], 0,
          stdout=["--max-memory"])
    check("--help wins over a usage error", accel, ["plan", "--bogus", "-h"], 0, stdout=["usage: accel plan"])
    check("estimate-memory --help", accel, ["estimate-memory", "--help"], 0,
          stdout=["usage: accel estimate-memory MODEL", "--dtypes", "--with-head", "--json"])
    check("inspect -h", accel, ["inspect", "-h"], 0, stdout=["usage: accel inspect PATH", "--json"])


def group_usage(accel, model):
    for command in COMMANDS:
        usage_error(f"{command}: an unknown option", accel, command, [model, "--bogus"], "unknown option --bogus")
    usage_error("a missing value at the end", accel, "plan", [model, "--max-memory"],
                "option --max-memory needs a value")
    usage_error("a missing value before another option", accel, "plan", [model, "--max-memory", "--json"],
                "option --max-memory needs a value")
    usage_error("a missing value of --dtypes", accel, "estimate-memory", [model, "--dtypes"],
                "option --dtypes needs a value")
    usage_error("a flag given a value", accel, "inspect", [model, "--json=yes"], "option --json takes no value")
    usage_error("a missing required option", accel, "plan", [model], "option --max-memory is required")
    usage_error("a missing positional", accel, "inspect", [], "missing PATH")
    usage_error("a missing positional after options", accel, "plan", ["--max-memory", "0=1GB"], "missing MODEL")
    usage_error("an extra positional", accel, "estimate-memory", [model, model], "unexpected argument")
    usage_error("an option given twice", accel, "plan", [model, "--max-memory", "0=1GB", "--dtype", "float16",
                                                         "--dtype", "float32"], "option --dtype given twice")
    usage_error("options that exclude each other", accel, "plan",
                [model, "--max-memory", "0=1GB", "--balanced", "--balanced-low-0"], "exclude each other")
    check("an unknown command", accel, ["frobnicate"], 2,
          stderr=["unknown command 'frobnicate'", "accel --help"])
    check("an unknown option before the command", accel, ["--bogus", "plan"], 2, stderr=["unknown option --bogus"])
    # A repeated list option adds to the list; --opt=value reads like --opt value.
    check("--max-memory given twice", accel, ["plan", model, "--max-memory=0=1GB", "--max-memory", "cpu=1GB", "--json"],
          0, stdout=['"": 0'])


def group_bad_input(accel, model):
    missing = "/nonexistent/accel-cli-test/model.safetensors"
    check("inspect: a missing file", accel, ["inspect", missing], 1,
          stderr=["accel inspect: error:", missing], not_stderr=["usage:"])
    check("plan: a missing file", accel, ["plan", missing, "--max-memory", "0=1GB"], 1,
          stderr=["accel plan: error:", missing])
    check("estimate-memory: a missing file", accel, ["estimate-memory", missing], 1,
          stderr=["accel estimate-memory: error:", missing])
    big = "18446744073709551616"  # 2^64
    check("a size past int64", accel, ["plan", model, "--max-memory", f"0={big}"], 1,
          stderr=["error: --max-memory 0:", big, "out of range"], not_stderr=["stoll", "usage:"])
    check("a size past what a byte count holds", accel, ["plan", model, "--max-memory", "0=9223372036854775807"], 1,
          stderr=["--max-memory 0:", "9223372036854775807", "out of range"])
    check("a size with a unit past int64", accel, ["plan", model, "--max-memory", "0=1GB,cpu=99999999999GB"], 1,
          stderr=["--max-memory cpu:", "99999999999GB", "out of range"])
    check("a reserve past int64", accel, ["plan", model, "--max-memory", "0=1GB", "--reserve", f"0={big}"], 1,
          stderr=["--reserve 0:", big, "out of range"], not_stderr=["stoll"])
    check("a token count past int64", accel, ["plan", model, "--max-memory", "0=1GB", "--kv-cache", f"{big}x2"], 1,
          stderr=["--kv-cache", big, "out of range"], not_stderr=["stoll"])
    check("a size that is not a size", accel, ["plan", model, "--max-memory", "0=12XB"], 1,
          stderr=["--max-memory 0:", "'12XB' is not a size"])
    check("an unknown device", accel, ["plan", model, "--max-memory", "gpu=1GB"], 1,
          stderr=["--max-memory:", "Device gpu is not recognized"])
    check("an unknown dtype", accel, ["plan", model, "--max-memory", "0=1GB", "--dtype", "float7"], 1,
          stderr=["--dtype:", "float7"])


def write_safetensors(path, tensors, metadata):
    """A float32 safetensors file of zeros: tensors is [(name, shape)]."""
    header, offset = {}, 0
    for name, shape in tensors:
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\0" * offset)


def group_output(accel):
    evil = "a.\x1b[31mred\x07.weight"
    escaped = "a.\\x1b[31mred\\x07.weight"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "evil.safetensors")
        write_safetensors(path, [(evil, [3]), ("b.weight", [1000, 300])], {"note": "\x1b[2Jcleared\u009b"})
        check("inspect escapes control characters in names", accel, ["inspect", path], 0,
              stdout=[escaped, "\\x1b[2Jcleared\\xc2\\x9b"])
        code, out, _ = run(accel, "inspect", path)
        ok = "\x1b" not in out and "\x07" not in out and "\u009b" not in out
        print(("PASS" if ok else "FAIL") + " inspect's table holds no raw control character")
        if not ok:
            failures.append("inspect's table holds no raw control character")
        code, out, _ = run(accel, "inspect", path, "--json")
        names = [t["name"] for t in json.loads(out)["tensors"]] if code == 0 else []
        ok = evil in names and "\x1b" not in out
        print(("PASS" if ok else "FAIL") + f" inspect --json escapes as JSON does and keeps the name: {names}")
        if not ok:
            failures.append("inspect --json escapes as JSON does")
        check("plan labels binary units and warns about bits", accel, ["plan", path, "--max-memory", "0=2mb,cpu=3MB"],
              0, stdout=["244.14 KiB", "2.86 MiB", "1.14 MiB"],
              stderr=["warning: --max-memory 0: '2mb' counts bits", "250000 bytes", "write 2MB"])
        check("no warning for bytes", accel, ["plan", path, "--max-memory", "0=2MB,cpu=3MiB"], 0,
              not_stderr=["warning"])
        code, out, _ = run(accel, "estimate-memory", path, "--json", "--dtypes", "float32,int4")
        rows = json.loads(out)["rows"] if code == 0 else []
        ok = len(rows) == 2 and all(isinstance(r[k], int) for r in rows for k in ("largest_layer", "total_size")) \
            and rows[1]["total_size"] == (1200012 + 7) // 8
        print(("PASS" if ok else "FAIL") + f" estimate-memory --json prints whole bytes: {rows}")
        if not ok:
            failures.append("estimate-memory --json prints whole bytes")
        # Names past the documented limits (4096 bytes, 256 dotted levels) are refused with the
        # file named, before a module tree grows with the square of their length.
        deep = os.path.join(d, "deep.safetensors")
        write_safetensors(deep, [(".".join(["m"] * 300) + ".w", [1])], {})
        check("plan refuses 301 dotted levels", accel, ["plan", deep, "--max-memory", "0=1GB"], 1,
              stderr=["deep.safetensors", "301 dotted levels (at most 256)"])
        long = os.path.join(d, "long.safetensors")
        write_safetensors(long, [("w" * 5000, [1])], {})
        check("plan refuses a 5000-byte name", accel, ["plan", long, "--max-memory", "0=1GB"], 1,
              stderr=["long.safetensors", "5000 bytes", "4096"])
        bad = os.path.join(d, "bad\x1b[31m.safetensors")
        with open(bad, "wb") as f:
            f.write(b"plain text, not a checkpoint\n")
        check("errors escape the names they quote", accel, ["inspect", bad], 1,
              stderr=["bad\\x1b[31m.safetensors", "not a checkpoint format accel reads"], not_stderr=["\x1b"])


def group_conformance(conformance, version):
    check("accel-conformance --help", conformance, ["--help"], 0,
          stdout=["usage: accel-conformance QUERY.json", "-h, --help", "exit status"])
    check("accel-conformance --version", conformance, ["--version"], 0, stdout=[f"accel-conformance {version}\n"])
    check("accel-conformance without a query", conformance, [], 2,
          stderr=["missing QUERY.json", "usage: accel-conformance QUERY.json", "accel-conformance --help"])
    check("accel-conformance: an unknown option", conformance, ["q.json", "--bogus"], 2,
          stderr=["unknown option --bogus"])
    code, out, _ = run(conformance, "/nonexistent/query.json")
    ok = code == 1 and '"error"' in out and "cannot open query file" in out
    print(("PASS" if ok else "FAIL") + f" accel-conformance: an unreadable query file: exit {code}, stdout {out.strip()}")
    if not ok:
        failures.append("accel-conformance: an unreadable query file")


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    group, accel, conformance, version, model = sys.argv[1:]
    if group == "help":
        group_help(accel, version, model)
    elif group == "usage":
        group_usage(accel, model)
    elif group == "bad-input":
        group_bad_input(accel, model)
    elif group == "output":
        group_output(accel)
    elif group == "conformance":
        group_conformance(conformance, version)
    else:
        sys.exit(f"unknown group {group!r}\n{__doc__}")
    if failures:
        sys.exit(f"{len(failures)} failed: {', '.join(failures)}")
    print("all passed")


if __name__ == "__main__":
    main()
