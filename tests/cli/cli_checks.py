"""What the CLI checkers share: failures collected rather than raised, accel run as a subprocess,
its --json output read with the failure named."""
import json
import subprocess

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def accel(binary, *args, env=None, timeout=120):
    return subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def as_json(proc, what):
    check(proc.returncode == 0, f"{what}: exit {proc.returncode}: {proc.stderr.strip()}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        check(False, f"{what}: stdout is not JSON: {proc.stdout[:200]!r}")
        return {}
