#!/usr/bin/env bash
# Installs what the VS Code tests (tests/tests/vscode.rs) need, at pinned
# versions, into git-ignored folders; a part already installed is left alone.
#
#   - Debian packages: chromium (the browser playwright drives), and the
#     headers and ripgrep that code-server's native modules build against
#     (apt-get, as root; skipped when all are present).
#   - code-server 4.100.3 (VS Code 1.100.3 in the browser; the newest that
#     runs on Node 20) from npm into <repo>/.peers/code-server-4.100.3.
#   - The extension's dependencies (vscode-languageclient; typescript and
#     @vscode/vsce to build it, pinned by its package-lock.json) and its
#     package, extension/moonkale-vscode-<version>.vsix (`npm run package`:
#     tsc, then vsce; .vscodeignore keeps the sources and dev files out),
#     which the tests install with `code-server --install-extension`.
#   - The driver's dependency (playwright-core).
#
# Called by scripts/install-test-peers.sh.
set -euo pipefail

CODE_SERVER_VERSION=4.100.3
APT_PACKAGES=(chromium ripgrep libkrb5-dev libxkbfile-dev libsecret-1-dev)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
dest="$repo/.peers/code-server-$CODE_SERVER_VERSION"
code_server="$dest/node_modules/code-server"

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing Debian packages: ${missing[*]}"
    sudo=""
    [[ $(id -u) == 0 ]] || sudo=sudo
    # The package lists may be older than the security updates already
    # installed (a -dev package then asks for an older library): refresh them.
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    echo "Debian packages already installed: ${APT_PACKAGES[*]}"
fi

installed_code_server() {
    # The version of a complete install: the marker is written last.
    cat "$dest/.complete" 2>/dev/null || true
}

if [[ "$(installed_code_server)" == "$CODE_SERVER_VERSION" ]]; then
    echo "code-server $CODE_SERVER_VERSION already installed"
else
    echo "installing code-server $CODE_SERVER_VERSION into $dest"
    rm -rf "$dest"
    mkdir -p "$dest"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # @vscode/ripgrep's install script downloads rg from GitHub, which this
    # machine cannot reach: seed its download cache with Debian's rg.
    cache="$tmp/vscode-ripgrep-cache-1.15.11"
    mkdir -p "$cache" "$tmp/rg"
    cp "$(command -v rg)" "$tmp/rg/rg"
    tar -czf "$cache/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" -C "$tmp/rg" rg
    export TMPDIR="$tmp"
    # node-gyp takes Node's headers from /usr/include/node (no download);
    # node-pty's install script runs `npx node-gyp`, which must not prompt.
    export npm_config_nodedir=/usr npm_config_yes=true
    echo '{"name": "moonkale-code-server", "private": true}' >"$dest/package.json"
    npm install --prefix "$dest" --no-audit --no-fund --save-exact --ignore-scripts \
        "code-server@$CODE_SERVER_VERSION"
    # code-server's postinstall installs lib/vscode's own dependencies. It
    # refuses root without unsafe_perm and reads npm's user agent.
    (cd "$code_server" &&
        npm_config_unsafe_perm=true npm_config_user_agent="npm/$(npm -v) node/$(node -v) linux x64" \
            sh ./postinstall.sh)
    # npm 11 may skip dependencies' install scripts there: build the native
    # modules explicitly.
    (cd "$code_server/lib/vscode" &&
        npm rebuild --foreground-scripts @parcel/watcher @vscode/deviceid @vscode/ripgrep \
            @vscode/spdlog kerberos native-watchdog node-pty)
    (cd "$dest" && npm rebuild argon2)
    echo "$CODE_SERVER_VERSION" >"$dest/.complete"
fi
echo "code-server: $code_server/out/node/entry.js"

for part in extension driver; do
    dir="$here/$part"
    # npm ci again only when the lock file changed since the last one.
    want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
    if [[ "$(cat "$dir/node_modules/.moonkale-lock" 2>/dev/null)" == "$want" ]]; then
        echo "vscode-test-harness/$part: dependencies already installed"
    else
        echo "vscode-test-harness/$part: npm ci"
        (cd "$dir" && npm ci --no-audit --no-fund)
        echo "$want" >"$dir/node_modules/.moonkale-lock"
    fi
done
# The package the tests install, rebuilt every time (a few seconds) so it is
# never older than the sources.
(cd "$here/extension" && npm run --silent package </dev/null)
vsix=$(cd "$here/extension" && node -p 'const p = require("./package.json"); `${p.name}-${p.version}.vsix`')
echo "extension: $here/extension/$vsix"
