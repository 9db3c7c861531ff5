#!/usr/bin/env bash
# Installs what building and testing client-wasm needs, skipping each piece
# that is already there (each step's comment in scripts/install-wasm-tools.sh
# says why it is done that way on this machine):
#
#   - the wasm32-unknown-unknown target          (rustup)
#   - wasm-pack                                  (cargo install --locked)
#   - wasm-bindgen-cli, the exact version of the wasm-bindgen crate in
#     Cargo.lock                                 (cargo install, not --locked)
#   - wasm-opt from npm's binaryen >= 116, in .tools/ (Debian's 108 breaks
#     wasm-bindgen's externref table)
#   - esbuild from npm, in .tools/ (bundles and minifies the package's
#     JavaScript)
#   - chromium + chromium-driver, and firefox-esr + geckodriver, for the
#     browser tests (apt; geckodriver by cargo install, its npm package
#     downloads from the internet), and webkit2gtk-driver + xvfb (WebKit's
#     MiniBrowser on a virtual display); skipped when WASM_TOOLS_BROWSER=0
#
# Source it to install and put .tools/node_modules/.bin and ~/.cargo/bin
# first on PATH in the calling shell:
#     . scripts/wasm-tools.sh
# Or run it to install and print the PATH line to eval:
#     eval "$(scripts/wasm-tools.sh)"

WASM_TOOLS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The installer is its own bash process (scripts/install-wasm-tools.sh):
# inside this `if`, a function or subshell would run with `set -e` switched
# off, and a failed step would not stop the ones after it.
if bash "$WASM_TOOLS_ROOT/scripts/install-wasm-tools.sh"; then
    _wasm_tools_path="$WASM_TOOLS_ROOT/.tools/node_modules/.bin:$HOME/.cargo/bin:$PATH"
    if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
        export PATH="$_wasm_tools_path"
    else
        printf 'export PATH=%q\n' "$_wasm_tools_path"
    fi
    unset _wasm_tools_path
else
    echo "wasm-tools: installation failed" >&2
    # `return` when sourced, `exit` when run.
    return 1 2>/dev/null || exit 1
fi
