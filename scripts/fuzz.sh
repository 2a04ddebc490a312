#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/) for SECONDS each (default 600)
# with libFuzzer, starting from the committed seeds (fuzz/seeds/<target>);
# new corpus entries go to fuzz/corpus/<target> (git-ignored), crashes to
# fuzz/artifacts/<target>. A crash becomes a regression: copy its input to
# fuzz/regressions/<target>/ (replayed by `cargo test` in fuzz/) and fix it.
#
#   scripts/fuzz.sh [SECONDS] [TARGET…]
#
# cargo-fuzz (pinned) is installed into .peers/cargo-fuzz. The toolchain here
# is stable: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its -Z flags.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO_FUZZ_VERSION=0.13.1
seconds=${1:-600}
shift || true
root=$PWD/.peers/cargo-fuzz
if [[ "$("$root/bin/cargo-fuzz" --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    cargo install --locked --root "$root" "cargo-fuzz@$CARGO_FUZZ_VERSION"
fi
export PATH="$root/bin:$PATH" RUSTC_BOOTSTRAP=1
# ASan's default 256 MiB quarantine made single lsp_session inputs (6 ms
# alone) cross libFuzzer's 1 s timeout while it recycled freed buffers on
# the busy 2-core machine; a smaller one keeps use-after-free detection.
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=32}
cd fuzz
targets=("$@")
if ((${#targets[@]} == 0)); then
    mapfile -t targets < <(cargo fuzz list)
fi
status=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    echo "== $t: ${seconds}s"
    if ! cargo fuzz run --release "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 -print_final_stats=1 2>"corpus/$t.log"; then
        echo "!! $t failed; see fuzz/corpus/$t.log and fuzz/artifacts/$t/"
        tail -30 "corpus/$t.log"
        status=1
    fi
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+.*DONE" "corpus/$t.log" || true
done
exit $status
