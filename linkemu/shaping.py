"""The kernel's part of a profile, as text: ``tc`` lines for the rate and queue, ``nft`` scripts for
random loss and NAT. Pure functions, so what the link asks the kernel for is testable without root.

UDP blocked (:func:`udp_block_script`): a firewall that lets TCP through and no UDP at all, as many
corporate and hotel networks do, for the video's fallback from WebRTC to H.264 over the websocket.

Rate and queue: ``tbf`` (``sch_netem`` is not in this kernel) as the root qdisc of a
direction's TUN device, i.e. the queue in front of the delay line. ``latency`` is the
longest a packet may wait in it (the queue's length in time); the bucket is 1 ms of rate
but at least two full-size packets (tbf needs a burst ≥ the MTU, and a smaller bucket than
one packet would stall). No rate: a 1000-packet FIFO.

>>> tc_lines("uplink", Direction(rate_bit_s=2e6, queue_s=0.25))
['qdisc replace dev uplink root tbf rate 2000000bit burst 3028 latency 250000us']
>>> tc_lines("uplink", Direction())
['qdisc replace dev uplink root pfifo limit 1000']
>>> print(loss_script("link0", 0.02))  # doctest: +NORMALIZE_WHITESPACE
add table inet linkemu
add counter inet linkemu lost
add chain inet linkemu input { type filter hook input priority filter; policy accept; }
flush chain inet linkemu input
add rule inet linkemu input iifname "link0" numgen random mod 1000000 < 20000 counter name "lost" drop
"""

from __future__ import annotations

from linkemu.profiles import Direction

MTU_BYTES = 1514
LOSS_SCALE = 1_000_000  # numgen draws in [0, LOSS_SCALE): loss resolution 1 ppm
TABLE = "linkemu"


def tbf_burst_bytes(rate_bit_s: float) -> int:
    """tbf's bucket for a rate, bytes.

    >>> tbf_burst_bytes(1e6), tbf_burst_bytes(100e6)
    (3028, 12500)
    """
    return max(2 * MTU_BYTES, round(rate_bit_s / 8 * 0.001))


def tc_lines(device: str, d: Direction) -> list[str]:
    """``tc -b`` lines that give ``device`` this direction's rate and queue."""
    if d.rate_bit_s is None:
        return [f"qdisc replace dev {device} root pfifo limit 1000"]
    return [f"qdisc replace dev {device} root tbf rate {round(d.rate_bit_s)}bit "
            f"burst {tbf_burst_bytes(d.rate_bit_s)} latency {round(d.queue_s * 1e6)}us"]


def loss_script(interface: str, loss: float) -> str:
    """An ``nft -f`` transaction (atomic) that drops ``loss`` of what arrives on ``interface`` at the
    input hook, counting the drops in the named counter ``lost`` (kept across changes)."""
    lines = [f"add table inet {TABLE}",
             f"add counter inet {TABLE} lost",
             f"add chain inet {TABLE} input {{ type filter hook input priority filter; policy accept; }}",
             f"flush chain inet {TABLE} input"]
    threshold = round(loss * LOSS_SCALE)
    if threshold > 0:
        lines.append(f'add rule inet {TABLE} input iifname "{interface}" numgen random mod {LOSS_SCALE} '
                     f'< {threshold} counter name "lost" drop')
    return "\n".join(lines) + "\n"


def nat_script(inside: str, outside: str, inside_tun: str, tuns: tuple[str, str], public_ip: str) -> str:
    """The middle namespace as a NAT router (a carrier's, or a home router's): what comes from
    ``inside`` leaves with the source ``public_ip``, and nothing from ``outside`` may open a
    connection inward.

    Every packet crosses the middle namespace twice (veth → TUN, then TUN → veth), and NAT
    rules run only for a connection's first packet, so conntrack sees the first crossing
    only (``notrack`` for what the delay line writes back): the source is rewritten on the
    way into the TUN device, and replies are de-NATed on arrival, before routing.

    >>> print(nat_script("to-robot", "to-operator", "uplink", ("uplink", "downlink"), "10.77.2.1"))
    table ip linkemu_nat {
      chain raw {
        type filter hook prerouting priority raw; policy accept;
        iifname { "uplink", "downlink" } notrack
      }
      chain forward {
        type filter hook forward priority filter; policy accept;
        iifname "to-operator" ct state new counter drop
      }
      chain postrouting {
        type nat hook postrouting priority srcnat; policy accept;
        iifname "to-robot" oifname "uplink" snat ip to 10.77.2.1
      }
    }
    <BLANKLINE>
    """
    chains = [("raw", "filter hook prerouting priority raw", f'iifname {{ "{tuns[0]}", "{tuns[1]}" }} notrack'),
              ("forward", "filter hook forward priority filter", f'iifname "{outside}" ct state new counter drop'),
              ("postrouting", "nat hook postrouting priority srcnat",
               f'iifname "{inside}" oifname "{inside_tun}" snat ip to {public_ip}')]
    body = "".join(f"  chain {name} {{\n    type {hook}; policy accept;\n    {rule}\n  }}\n"
                   for name, hook, rule in chains)
    return f"table ip {TABLE}_nat {{\n{body}}}\n"


def tcp_forward_script(outside: str, public_ip: str, inside_ip: str, port: int) -> str:
    """A port forward on the NAT of :func:`nat_script`: TCP to ``public_ip:port`` from ``outside`` goes to
    ``inside_ip:port`` (destination rewritten before routing), and the forward chain lets such a
    connection in (its ``accept`` goes before the NAT's drop of new inbound connections). Replies are
    de-NATed by conntrack, as the robot's own outbound connections are.

    >>> print(tcp_forward_script("to-operator", "10.77.2.1", "10.77.1.2", 8080), end="")
    add chain ip linkemu_nat prerouting { type nat hook prerouting priority dstnat; policy accept; }
    add rule ip linkemu_nat prerouting iifname "to-operator" ip daddr 10.77.2.1 tcp dport 8080 dnat ip to 10.77.1.2:8080
    insert rule ip linkemu_nat forward iifname "to-operator" ct status dnat accept
    """
    return "\n".join([
        f"add chain ip {TABLE}_nat prerouting {{ type nat hook prerouting priority dstnat; policy accept; }}",
        f'add rule ip {TABLE}_nat prerouting iifname "{outside}" ip daddr {public_ip} tcp dport {port} '
        f"dnat ip to {inside_ip}:{port}",
        f'insert rule ip {TABLE}_nat forward iifname "{outside}" ct status dnat accept']) + "\n"


def udp_block_script(blocked: bool, interfaces: tuple[str, str]) -> str:
    """An ``nft -f`` transaction for the middle namespace: with ``blocked``, every UDP packet that arrives
    from either side is dropped as it is forwarded (counted in ``udp_dropped``); without, the chain is
    emptied. Its own table, so profile changes and the NAT leave it alone. ICMP and TCP still pass.

    >>> print(udp_block_script(True, ("to-robot", "to-operator")))  # doctest: +NORMALIZE_WHITESPACE
    add table inet linkemu_udp
    add counter inet linkemu_udp udp_dropped
    add chain inet linkemu_udp forward { type filter hook forward priority filter; policy accept; }
    flush chain inet linkemu_udp forward
    add rule inet linkemu_udp forward iifname { "to-robot", "to-operator" } meta l4proto udp counter name "udp_dropped" drop
    """
    lines = [f"add table inet {TABLE}_udp",
             f"add counter inet {TABLE}_udp udp_dropped",
             f"add chain inet {TABLE}_udp forward {{ type filter hook forward priority filter; policy accept; }}",
             f"flush chain inet {TABLE}_udp forward"]
    if blocked:
        lines.append(f'add rule inet {TABLE}_udp forward iifname {{ "{interfaces[0]}", "{interfaces[1]}" }} '
                     f'meta l4proto udp counter name "udp_dropped" drop')
    return "\n".join(lines) + "\n"
