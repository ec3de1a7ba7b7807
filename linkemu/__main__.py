"""``python -m linkemu``: an emulated link for people and scripts (docs/networks.md).

::

    python -m linkemu up 4g [--nat] [--seed N]   # in the foreground until Ctrl-C / SIGTERM
    python -m linkemu exec robot -- python -m server --config config/rover-sim.toml --host 10.77.1.2
    python -m linkemu exec operator -- curl http://10.77.1.2:8080/api/state
    python -m linkemu set bad                    # a new profile, live
    python -m linkemu blackout 3                 # both directions dark for 3 s
    python -m linkemu stall 0.4                  # everything held 0.4 s, then delivered in order
    python -m linkemu udp block | udp allow      # a firewall that passes TCP only
    python -m linkemu status                     # the profile and the counters
    python -m linkemu profiles                   # the named profiles
    python -m linkemu measure [4g …]             # how close each comes to its figures
    python -m linkemu cleanup                    # namespaces left by runs that died

``up`` listens on a Unix socket, ``/run/linkemu/<middle namespace>.sock``, one JSON request per
line; the other commands talk to it (``--link NAME`` picks one when several are up). Needs
root, ``ip``/``tc`` (iproute2), ``nft`` (nftables) and ``/dev/net/tun``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from linkemu import netns
from linkemu.link import Link, LinkError
from linkemu.profiles import PROFILES, profile as lookup_profile
from server.procutil import process_alive

CONTROL_DIR = Path("/run/linkemu")

log = logging.getLogger("linkemu")


# ---------------------------------------------------------------------- the running link's control socket
def _serve(link: Link, listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # closed: the link is going down
            return
        with conn, conn.makefile("rwb") as f:
            for line in f:
                f.write(json.dumps(_handle(link, json.loads(line))).encode() + b"\n")
                f.flush()


def _handle(link: Link, request: dict[str, Any]) -> dict[str, Any]:
    try:
        cmd = request.get("cmd")
        if cmd == "set":
            link.set_profile(request["profile"])
        elif cmd == "blackout":
            link.blackout(request.get("duration_s"), request.get("direction", "both"))
        elif cmd == "stall":
            link.stall(request["duration_s"], request.get("direction", "both"))
        elif cmd == "end_blackout":
            link.end_blackout(request.get("direction", "both"))
        elif cmd == "udp":
            link.block_udp(bool(request["blocked"]))
        elif cmd != "status":
            return {"ok": False, "error": f"unknown command {cmd!r}"}
        return {"ok": True, "profile": link.profile.describe(), "names": link.names, "stats": link.stats()}
    except (LinkError, ValueError, KeyError) as err:
        return {"ok": False, "error": str(err)}


def _running() -> dict[str, Path]:
    """Control sockets of running ``up`` processes: middle namespace → socket (dead ones removed)."""
    found = {}
    for path in sorted(CONTROL_DIR.glob("*.sock")) if CONTROL_DIR.is_dir() else []:
        parsed = netns.parse_name(path.stem)
        if parsed is None or not process_alive(parsed[1]):
            path.unlink(missing_ok=True)
            continue
        found[path.stem] = path
    return found


def _pick(which: str | None) -> str | None:
    """The middle namespace name of the one running link ``which`` names (a name or a prefix of one)."""
    running = _running()
    matches = [name for name in running if which is None or name.startswith(which)]
    if len(matches) == 1:
        return matches[0]
    print(f"linkemu: {'no link is up' if not matches else 'several links are up: ' + ', '.join(matches)}; "
          + ("start one with `python -m linkemu up PROFILE`" if not matches else "pick one with --link"),
          file=sys.stderr)
    return None


def _ask(which: str | None, request: dict[str, Any]) -> int:
    middle = _pick(which)
    if middle is None:
        return 2
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(CONTROL_DIR / f"{middle}.sock"))
        with s.makefile("rwb") as f:
            f.write(json.dumps(request).encode() + b"\n")
            f.flush()
            reply = json.loads(f.readline())
    if not reply.get("ok"):
        print(f"linkemu: {reply.get('error')}", file=sys.stderr)
        return 1
    print(reply["profile"])
    for which_dir, counts in reply["stats"].items():
        print(f"  {which_dir}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


# ---------------------------------------------------------------------- commands
def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def cmd_up(args: argparse.Namespace) -> int:
    link = Link(args.profile, nat=args.nat, seed=args.seed)
    signal.signal(signal.SIGTERM, _interrupt)  # a bench or systemd stopping us tears down like Ctrl-C
    try:
        link.start()
    except LinkError as err:
        print(f"linkemu: {err}", file=sys.stderr)
        return 1
    CONTROL_DIR.mkdir(parents=True, exist_ok=True)
    path = CONTROL_DIR / f"{link.names['middle']}.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    path.chmod(0o600)  # whoever can write to it changes the link
    listener.listen()
    threading.Thread(target=_serve, args=(link, listener), daemon=True, name="linkemu-control").start()
    me = f"{sys.executable} -m linkemu"
    print(f"linkemu: link up, {link.profile.describe()}{' (NAT)' if link.nat else ''}\n"
          f"  robot     {link.robot_ip:<10} ip netns exec {link.names['robot']} CMD   (or {me} exec robot -- CMD)\n"
          f"  operator  {link.operator_ip:<10} ip netns exec {link.names['operator']} CMD\n"
          f"  change it: {me} set PROFILE | blackout SECONDS | status    (control: {path})\n"
          f"Ctrl-C to tear down.", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut the teardown short
            signal.signal(sig, signal.SIG_IGN)
        listener.close()
        path.unlink(missing_ok=True)
        link.close()
        print("linkemu: link down, namespaces removed", flush=True)
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    middle = _pick(args.link)
    if middle is None:
        return 2
    argv = args.argv
    if not argv:
        print("linkemu: exec needs a command after --", file=sys.stderr)
        return 2
    target = middle.rsplit("-", 1)[0] + f"-{args.side}"
    os.execv(netns.tool("ip"), ["ip", "netns", "exec", target, *argv])
    return 0  # not reached


def cmd_profiles(args: argparse.Namespace) -> int:
    for p in PROFILES.values():
        print(p.describe())
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    removed = netns.remove_stale()
    _running()  # drops dead control sockets
    print(f"linkemu: removed {', '.join(removed)}" if removed else "linkemu: nothing left by dead runs")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m linkemu", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="profiles: " + ", ".join(PROFILES) + "; docs/networks.md")
    sub = ap.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="bring a link up, in the foreground")
    up.add_argument("profile", choices=list(PROFILES))
    up.add_argument("--nat", action="store_true", help="the middle is a NAT: the operator cannot dial in")
    up.add_argument("--seed", type=int, help="seed jitter and bursts")
    s = sub.add_parser("set", help="change a running link's profile")
    s.add_argument("profile", choices=list(PROFILES))
    b = sub.add_parser("blackout", help="darken a running link")
    b.add_argument("seconds", type=float, nargs="?", help="how long (default: until `blackout --end`)")
    b.add_argument("--direction", choices=["both", "uplink", "downlink"], default="both")
    b.add_argument("--end", action="store_true", help="end a blackout now")
    st = sub.add_parser("stall", help="hold a running link's packets, then deliver them in order")
    st.add_argument("seconds", type=float)
    st.add_argument("--direction", choices=["both", "uplink", "downlink"], default="both")
    u = sub.add_parser("udp", help="block or allow UDP on a running link (a firewall that passes TCP only)")
    u.add_argument("action", choices=["block", "allow"])
    sub.add_parser("status", help="a running link's profile and counters")
    e = sub.add_parser("exec", help="run a command on one side of a running link")
    e.add_argument("side", choices=["robot", "operator", "middle"])
    e.add_argument("argv", nargs="*", help="the command (after --, so its options stay its own)")
    sub.add_parser("profiles", help="list the named profiles")
    m = sub.add_parser("measure", help="bring each profile up and measure it (a Markdown table)")
    m.add_argument("profile", nargs="*", help=f"of {', '.join(PROFILES)} (default: all)")
    sub.add_parser("cleanup", help="remove namespaces left by runs that died")
    for p in (s, b, st, u, e, sub.choices["status"]):
        p.add_argument("--link", help="which running link (its namespace name, or a prefix of it)")
    argv = list(sys.argv[1:] if argv is None else argv)
    tail: list[str] = []
    if "--" in argv:  # everything after -- is exec's command, options and all
        argv, tail = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    args = ap.parse_args(argv)
    if args.command == "exec":
        args.argv = [*args.argv, *tail]
    logging.basicConfig(level="WARNING", format="linkemu: %(message)s")
    if args.command == "up":
        return cmd_up(args)
    if args.command == "set":
        lookup_profile(args.profile)
        return _ask(args.link, {"cmd": "set", "profile": args.profile})
    if args.command == "blackout":
        if args.end:
            return _ask(args.link, {"cmd": "end_blackout", "direction": args.direction})
        return _ask(args.link, {"cmd": "blackout", "duration_s": args.seconds, "direction": args.direction})
    if args.command == "stall":
        return _ask(args.link, {"cmd": "stall", "duration_s": args.seconds, "direction": args.direction})
    if args.command == "udp":
        return _ask(args.link, {"cmd": "udp", "blocked": args.action == "block"})
    if args.command == "status":
        return _ask(args.link, {"cmd": "status"})
    if args.command == "exec":
        return cmd_exec(args)
    if args.command == "profiles":
        return cmd_profiles(args)
    if args.command == "measure":
        from linkemu.measure import table

        for name in args.profile:
            if name not in PROFILES:
                ap.error(f"argument profile: invalid choice: {name!r} (choose from {', '.join(PROFILES)})")
        print(table(args.profile or list(PROFILES)))
        return 0
    return cmd_cleanup(args)


if __name__ == "__main__":
    sys.exit(main())
