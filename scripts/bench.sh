#!/usr/bin/env bash
# Builds every binary in release mode and prints the benchmark figures.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --bins
exec target/release/moonkale-bench "$@"
