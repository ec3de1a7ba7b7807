#!/bin/sh
# Install what the link emulator (linkemu/, docs/networks.md) and the tests over it drive: `ip` and `tc`
# (iproute2), `nft` (nftables) and `turnserver` (coturn: the TURN relay of the WebRTC relay test,
# tests/linkemu/test_webrtc_turn.py; docs/video.md "TURN"). Called by `make test` beside install-browser.sh,
# so CI and a clean machine have them.
#
# Idempotent: does nothing when all are there. Not being root with no sudo is not an error here: the
# emulator's tests then skip with the reason (they need root for namespaces anyway).
#
# coturn's package enables no service by default (/etc/default/coturn keeps TURNSERVER_ENABLED unset),
# and a service started by the package is stopped at once: the tests start their own turnserver inside
# the test's network namespace, listening on the namespace's address only.
set -eu

# PATH may lack /usr/sbin for a non-login shell; iproute2 and nftables put their tools there
PATH="$PATH:/usr/sbin:/sbin"
missing=""
command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || missing="$missing iproute2"
command -v nft >/dev/null 2>&1 || missing="$missing nftables"
command -v turnserver >/dev/null 2>&1 || missing="$missing coturn"

if [ -z "$missing" ]; then
    echo "install-network-tools: ip, tc, nft and turnserver present ($(nft --version 2>/dev/null || echo 'nft version unknown'))"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "install-network-tools: missing$missing and not root (no sudo): the link emulator's tests will skip" >&2
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
# shellcheck disable=SC2086  # the list is word-split on purpose
$SUDO apt-get install -y --no-install-recommends $missing

case "$missing" in
    *coturn*)
        # the package may start its own relay on every interface: the tests want none outside their namespaces
        if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
            $SUDO systemctl disable --now coturn >/dev/null 2>&1 || true
        elif [ -x /etc/init.d/coturn ]; then
            $SUDO /etc/init.d/coturn stop >/dev/null 2>&1 || true
        fi
        ;;
esac

for tool in ip tc nft turnserver; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "install-network-tools: apt installed$missing but $tool is still missing" >&2
        exit 1
    fi
done
echo "install-network-tools: installed$missing ($(nft --version))"
