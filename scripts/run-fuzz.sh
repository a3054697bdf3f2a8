#!/usr/bin/env bash
# Builds the libFuzzer targets of the checkpoint parsers (fuzz/) and runs each for RUNS executions.
#   scripts/run-fuzz.sh                      every target, 1000000 executions each
#   scripts/run-fuzz.sh 20000                a quick pass
#   scripts/run-fuzz.sh 1000000 fuzz_torch_bin fuzz_offload_index    some targets
# Each target starts from a fresh copy of fuzz/corpus/<target> in build-fuzz/corpus/ (the seeds
# in the tree never change); a crash, sanitizer report, timeout or over-limit allocation leaves
# its input in build-fuzz/artifacts/ and the full log in build-fuzz/logs/. Exits non-zero when
# any target fails. Targets run one after the other: libFuzzer uses one core each.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-1000000}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(fuzz_safetensors_header fuzz_sharded_index fuzz_offload_index fuzz_torch_bin fuzz_torch_pickle fuzz_tokenizer_json fuzz_model_config fuzz_gguf fuzz_gguf_roundtrip fuzz_bnb_state)
[[ "$runs" =~ ^[0-9]+$ ]] || { echo "run-fuzz: RUNS must be a number, got '$runs'" >&2; exit 2; }

ACCEL_FUZZ=1 "$root/scripts/install-deps.sh"

build=$root/build-fuzz
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

mkdir -p "$build/logs" "$build/artifacts"
# Leak checks stay on; sanitizer reports abort so libFuzzer records the input.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
summary=()
for t in "${targets[@]}"; do
  [[ -d "$root/fuzz/corpus/$t" ]] || { echo "run-fuzz: no corpus for '$t'" >&2; exit 2; }
  work=$build/corpus/$t
  rm -rf "$work"
  mkdir -p "$work"
  cp "$root/fuzz/corpus/$t"/* "$work/"
  log=$build/logs/$t.log
  echo "run-fuzz: $t, $runs executions (log: $log)"
  rc=0
  "$build/$t" "$work" -runs="$runs" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
    -dict="$root/fuzz/dict/$t.dict" -use_value_profile=1 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  line="$t: ${execs:-?} executions, ${rate:-?} exec/s, ${cov:-no coverage line}"
  if ((rc != 0)) || [[ -z "$execs" ]] || ((execs < runs)); then
    line+=" -- FAILED (exit $rc)"
    failed+=("$t")
    grep -E '^(==[0-9]+==|SUMMARY|.*runtime error|.*Test unit written|.*ERROR: libFuzzer)' "$log" | head -20 >&2 || true
  fi
  echo "run-fuzz: $line"
  summary+=("$line")
done

echo
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "run-fuzz: failed: ${failed[*]} (inputs in $build/artifacts/, logs in $build/logs/)" >&2
  exit 1
fi
