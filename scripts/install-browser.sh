#!/bin/sh
# Install the Chromium the end-to-end tests drive (tests/e2e/).
#
# Idempotent: does nothing when the browser is already there. The tests use the
# distribution's Chromium (not `playwright install`, which downloads from a CDN
# this machine cannot reach); TELEOP_CHROMIUM overrides the path.
set -eu

CHROMIUM="${TELEOP_CHROMIUM:-/usr/bin/chromium}"

if [ -x "$CHROMIUM" ]; then
    echo "install-browser: $CHROMIUM present ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "install-browser: $CHROMIUM is missing and I am not root (no sudo): install the 'chromium' package" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium fonts-dejavu-core

if [ ! -x "$CHROMIUM" ]; then
    echo "install-browser: apt installed chromium but $CHROMIUM is still missing" >&2
    exit 1
fi
echo "install-browser: installed $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
