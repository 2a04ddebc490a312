#!/usr/bin/env bash
# Builds every binary in release mode and prints the benchmark figures:
# `scripts/bench.sh` runs every section, `scripts/bench.sh acp first-token`
# only those (`--help` lists them; `acp` compares `moonkale-service acp`
# with claude-agent-acp, both installed by scripts/install-test-peers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --bins
exec "${CARGO_TARGET_DIR:-target}/release/moonkale-bench" "$@"
