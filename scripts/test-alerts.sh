#!/usr/bin/env bash
# The alerting rules (deploy/prometheus/rules.yml) checked and unit-tested
# with promtool (Debian's `prometheus` package, installed when missing):
# each alert fires when it should, not before its `for`, once per job.
#   scripts/test-alerts.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/deploy/prometheus"
if ! command -v promtool >/dev/null 2>&1; then
  echo "alerts: installing promtool (Debian's prometheus package)" >&2
  as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  install() {
    as_root flock /tmp/apt.lock env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends prometheus >&2
  }
  install || { as_root flock /tmp/apt.lock apt-get update >&2 && install; }
fi
promtool check rules rules.yml
promtool test rules rules_test.yml
# One result line in cargo's form, for scripts/test-total.sh: each test
# group of rules_test.yml is a test.
groups=$(grep -c '^  - interval:' rules_test.yml)
echo "test result: ok. $groups passed; 0 failed; 0 ignored"
