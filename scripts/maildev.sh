#!/usr/bin/env bash
# Installs MailDev, the SMTP server the receipt tests send to, into .tools/
# of this checkout (npm package maildev@3.0.0; Node.js and npm from Debian
# if the machine has none). Skipped when that version is already there; a
# failed step stops the script and is named. The test kit finds it at
# .tools/node_modules/.bin/maildev (MAILDEV_BIN overrides).
#   scripts/maildev.sh
set -Eeuo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MAILDEV_VERSION=3.0.0
say() { echo "maildev: $*" >&2; }
trap 'say "FAILED (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    say "installing nodejs and npm"
    as_root apt-get update >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y nodejs npm >&2
fi

bin="$ROOT/.tools/node_modules/.bin/maildev"
installed="$("$bin" --version 2>/dev/null || true)"
if [ "$installed" != "$MAILDEV_VERSION" ]; then
    say "installing maildev@$MAILDEV_VERSION from npm into .tools/ (about 15 s)"
    mkdir -p "$ROOT/.tools"
    npm install --prefix "$ROOT/.tools" --no-audit --no-fund --loglevel=error \
        "maildev@$MAILDEV_VERSION" >&2
    installed="$("$bin" --version)"
    [ "$installed" = "$MAILDEV_VERSION" ] || { say "installed $installed, expected $MAILDEV_VERSION"; exit 1; }
fi
