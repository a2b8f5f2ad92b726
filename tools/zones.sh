#!/bin/bash
# Three availability zones on one machine, for the zone routing tests: network
# namespaces as zones, a region namespace routing between them, and nftables
# counters giving the bytes each zone sent to each other zone.
#
#   tools/zones.sh up [PREFIX]        create the zones; print their description (below)
#   tools/zones.sh env [PREFIX]       print the description of zones that are up
#   tools/zones.sh stats [PREFIX]     print the byte counters, one line each:
#                                     "a->b bytes=N packets=M" (zone to zone: billed),
#                                     "a->region", "region->a" (the services: free),
#                                     "a->host", "host->a" (the root namespace: tests)
#   tools/zones.sh exec PREFIX ZONE CMD [ARG...]   run CMD in zone ZONE (a, b, c, r)
#   tools/zones.sh down [PREFIX]      remove everything `up` created
#   tools/zones.sh gc                 `down` for every set whose owner process is gone
#   tools/zones.sh check              install nftables if missing, say whether `up` can work
#
# PREFIX (default skz; letters, digits and '-', at most 24) names the namespaces
# PREFIX-a, PREFIX-b, PREFIX-c (zones a, b, c) and PREFIX-r (the region), so that
# concurrent runs never collide: tests use skz-<pid>. Each set gets a free /16,
# 10.N.0.0/16 with N in 200..254, chosen under a machine-wide lock:
#
#   zone a: 10.N.1.1 on eth0 (10.N.1.0/24)   zone b: 10.N.2.1   zone c: 10.N.3.1
#   region: the router, 10.N.Z.254 towards zone Z; 10.N.255.2 towards the host
#   host (the root namespace): 10.N.255.1, with a route to 10.N.0.0/16, so that
#          tests reach every node directly
#   REGION_ADDR 10.N.0.1: what AWS makes regional (the shared volume, S3, etcd).
#          Connections from the zones to 10.N.0.1:PORT reach 127.0.0.1:PORT of the
#          root namespace (nftables DNAT with route_localnet on the host's end of
#          the link), where tests/run.sh starts NFS-Ganesha, the S3 emulator and
#          etcd: replace 127.0.0.1 by REGION_ADDR in their URLs.
#
# Zone-to-zone traffic passes the region's forward hook and is counted there per
# (source zone, destination zone); traffic inside a zone never leaves its namespace
# (free, as within an AWS zone). Run a process in a zone with
# `ip netns exec PREFIX-a CMD`. There is no netem in every kernel: tools/zonefwd.py
# adds inter-zone delay and faults where a test needs them.
#
# The description printed by `up` and `env` is shell assignments (also kept in
# /run/skiff-zones/PREFIX.env): ZONES_PREFIX, ZONES ("a b c"), ZONE_NS_<z>,
# ZONE_ADDR_<z>, ZONE_CIDR_<z>, ZONE_CIDRS (client.zone.cidrs for the nodes),
# REGION_NS, REGION_ADDR, HOST_ADDR, UPLINK (the host's interface), ZONES_OWNER.
# With SKIFF_ZONES_OWNER_PID set at `up`, `gc` removes the set once that process is
# gone. `down` removes namespaces, links, routes and the host's nft table; it warns
# about processes still running in a zone (a namespace lives on while one does).
#
# Needs root, iproute2 and nftables (`check` and `up` install nftables with apt-get
# when it is missing). Exit status: 0 done, 1 failure, 2 usage, 77 this machine
# cannot have zones: not root, no network namespaces, no nftables (callers skip).
set -eu

STATE=/run/skiff-zones
ZONES="a b c"
NET_FIRST=200
NET_LAST=254

die() { echo "zones.sh: $*" >&2; exit 1; }
cannot() { echo "zones.sh: $*" >&2; exit 77; }

zone_index() { case $1 in a) echo 1 ;; b) echo 2 ;; c) echo 3 ;; *) return 1 ;; esac; }

check_prefix() {
  case "$1" in
    "" | *[!a-z0-9-]*) die "PREFIX must be letters a-z, digits or '-' (got '$1')" ;;
  esac
  [ ${#1} -le 24 ] || die "PREFIX is longer than 24 characters: $1"
}

need_root() {
  [ "$(id -u)" -eq 0 ] || cannot "network namespaces and nftables need root (running as uid $(id -u))"
  command -v ip >/dev/null 2>&1 || cannot "ip is missing (apt-get install iproute2)"
}

# nftables is not on a fresh Debian machine: install it, as tools/install-deps.sh does.
need_nft() {
  command -v nft >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || cannot "nft is missing and there is no apt-get to install nftables"
  echo "zones.sh: installing nftables" >&2
  (
    flock 9
    command -v nft >/dev/null 2>&1 && exit 0
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=120 nftables >&2 ||
      { apt-get update -qq >&2 &&
        apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=120 nftables >&2; }
  ) 9>"${TMPDIR:-/tmp}/skiff-zones-apt.lock" || cannot "could not install nftables"
  command -v nft >/dev/null 2>&1 || cannot "nft is still missing after installing nftables"
}

# Whether this machine can create a namespace with an nft table in it.
probe() {
  local ns="skzprobe-$$"
  ip netns add "$ns" 2>/dev/null || cannot "cannot create network namespaces (ip netns add failed)"
  if ! printf 'table inet t {\n chain c {\n  type filter hook forward priority 0; policy accept;\n  counter\n }\n}\n' |
      ip netns exec "$ns" nft -f - 2>/dev/null; then
    ip netns del "$ns" 2>/dev/null || true
    cannot "nftables does not work in a network namespace here (no nf_tables in this kernel?)"
  fi
  ip netns del "$ns"
}

state_file() { echo "$STATE/$1.env"; }

load() {
  local f
  f=$(state_file "$1")
  [ -f "$f" ] || die "no zones named $1 are up (no $f)"
  # shellcheck disable=SC1090
  . "$f"
}

# A second octet N whose 10.N.0.0/16 nobody uses: no set of ours, no address or
# route of the host. Called under the lock.
pick_net() {
  local n used
  used=$(cat "$STATE"/*.env 2>/dev/null | sed -n 's/^ZONES_NET=//p')
  for n in $(seq $NET_FIRST $NET_LAST | shuf); do
    grep -qx "$n" <<<"$used" && continue
    ip -4 addr show | grep -q " 10\.$n\." && continue
    ip -4 route show | grep -q "^10\.$n\." && continue
    ip link show "skzu$n" >/dev/null 2>&1 && continue
    echo "$n"
    return 0
  done
  return 1
}

owner_mark() { # PID -> "PID:starttime" or nothing
  local st
  [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] || return 0
  st=$(sed 's/.*) //' "/proc/$1/stat" | awk '{ print $20 }')
  echo "$1:$st"
}

up() {
  local p=$1 n f z i ns region uplink
  check_prefix "$p"
  need_root
  need_nft
  mkdir -p "$STATE"
  f=$(state_file "$p")
  exec 9>"$STATE/.lock"
  flock 9
  [ ! -f "$f" ] || die "zones $p are up already ($f); tools/zones.sh down $p first"
  for z in $ZONES r; do
    [ ! -e "/run/netns/$p-$z" ] || die "namespace $p-$z exists already"
  done
  probe
  n=$(pick_net) || die "no free 10.N.0.0/16 with N in $NET_FIRST..$NET_LAST"
  region="$p-r"
  uplink="skzu$n"
  {
    echo "ZONES_PREFIX=$p"
    echo "ZONES_NET=$n"
    echo "ZONES=\"$ZONES\""
    for z in $ZONES; do
      i=$(zone_index "$z")
      echo "ZONE_NS_$z=$p-$z"
      echo "ZONE_ADDR_$z=10.$n.$i.1"
      echo "ZONE_CIDR_$z=10.$n.$i.0/24"
    done
    echo "ZONE_CIDRS=10.$n.1.0/24=a,10.$n.2.0/24=b,10.$n.3.0/24=c"
    echo "REGION_NS=$region"
    echo "REGION_ADDR=10.$n.0.1"
    echo "HOST_ADDR=10.$n.255.1"
    echo "UPLINK=$uplink"
    echo "ZONES_OWNER=$(owner_mark "${SKIFF_ZONES_OWNER_PID:-}")"
  } >"$f.tmp"
  mv "$f.tmp" "$f"
  # From here on a failure removes what was made.
  trap 'echo "zones.sh: up failed; removing what it made" >&2; down "$p" >/dev/null 2>&1 || true' ERR
  set -E

  ip netns add "$region"
  ip -n "$region" link set lo up
  ip netns exec "$region" sysctl -qw net.ipv4.ip_forward=1
  # The link to the host: its end takes REGION_ADDR too, and hands what arrives
  # for it to the services on its loopback.
  ip link add "$uplink" type veth peer name tohost netns "$region"
  ip addr add "10.$n.255.1/30" dev "$uplink"
  ip addr add "10.$n.0.1/32" dev "$uplink"
  sysctl -qw "net.ipv4.conf.$uplink.route_localnet=1"
  ip link set "$uplink" up
  ip -n "$region" addr add "10.$n.255.2/30" dev tohost
  ip -n "$region" link set dev tohost up
  ip -n "$region" route add "10.$n.0.1/32" via "10.$n.255.1"
  ip route add "10.$n.0.0/16" via "10.$n.255.2" dev "$uplink" src "10.$n.255.1"
  for z in $ZONES; do
    i=$(zone_index "$z")
    ns="$p-$z"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "z-$z" netns "$region" type veth peer name eth0 netns "$ns"
    ip -n "$region" addr add "10.$n.$i.254/24" dev "z-$z"
    ip -n "$region" link set "z-$z" up
    ip -n "$ns" addr add "10.$n.$i.1/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "10.$n.$i.254"
  done

  # The host: TCP for REGION_ADDR from the region goes to the same port of 127.0.0.1.
  nft -f - <<EOF
table ip skz_$n {
  chain pre {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "$uplink" ip daddr 10.$n.0.1 meta l4proto tcp dnat to 127.0.0.1
  }
}
EOF
  # The region: one counter per direction.
  {
    echo "table inet zones {"
    echo "  chain zfwd {"
    echo "    type filter hook forward priority 0; policy accept;"
    for s in $ZONES; do
      for d in $ZONES; do
        [ "$s" = "$d" ] && continue
        echo "    iifname \"z-$s\" oifname \"z-$d\" counter comment \"$s->$d\""
      done
      echo "    iifname \"z-$s\" oifname \"tohost\" ip daddr 10.$n.0.1 counter comment \"$s->region\""
      echo "    iifname \"tohost\" oifname \"z-$s\" ip saddr 10.$n.0.1 counter comment \"region->$s\""
      echo "    iifname \"z-$s\" oifname \"tohost\" ip daddr != 10.$n.0.1 counter comment \"$s->host\""
      echo "    iifname \"tohost\" oifname \"z-$s\" ip saddr != 10.$n.0.1 counter comment \"host->$s\""
    done
    # Nothing beyond the host's two addresses, should the host forward packets.
    echo "    iifname \"z-*\" oifname \"tohost\" ip daddr != { 10.$n.0.1, 10.$n.255.1 } drop"
    echo "  }"
    echo "}"
  } | ip netns exec "$region" nft -f -
  trap - ERR
  cat "$f"
}

stats() {
  load "$1"
  ip netns exec "$REGION_NS" nft list table inet zones |
    sed -n 's/.*counter packets \([0-9]*\) bytes \([0-9]*\) comment "\(.*\)".*/\3 bytes=\2 packets=\1/p'
}

down() {
  local p=$1 f z left="" pids
  check_prefix "$p"
  need_root
  f=$(state_file "$p")
  ZONES_NET="" UPLINK=""
  # shellcheck disable=SC1090
  [ -f "$f" ] && . "$f"
  for z in $ZONES r; do
    [ -e "/run/netns/$p-$z" ] || continue
    pids=$(ip netns pids "$p-$z" 2>/dev/null | tr '\n' ' ')
    [ -n "$pids" ] && left="$left $p-$z: $pids;"
    ip netns del "$p-$z" || true
  done
  # The namespaces go away asynchronously: remove the host's side now.
  if [ -n "$UPLINK" ] && ip link show "$UPLINK" >/dev/null 2>&1; then
    ip link del "$UPLINK" || true
  fi
  if [ -n "$ZONES_NET" ] && command -v nft >/dev/null 2>&1 &&
      nft list table ip "skz_$ZONES_NET" >/dev/null 2>&1; then
    nft delete table ip "skz_$ZONES_NET" || true
  fi
  rm -f "$f"
  if [ -n "$left" ]; then
    echo "zones.sh: processes still run in removed zones (they keep their namespace" \
         "alive until they exit):$left" >&2
  fi
}

gc() {
  local f owner pid st
  need_root
  [ -d "$STATE" ] || return 0
  for f in "$STATE"/*.env; do
    [ -f "$f" ] || continue
    owner=$(sed -n 's/^ZONES_OWNER=//p' "$f")
    [ -n "$owner" ] || continue
    pid=${owner%%:*} st=${owner#*:}
    if [ "$(owner_mark "$pid")" != "$pid:$st" ]; then
      echo "zones.sh: removing $(basename "$f" .env) (owner $pid is gone)" >&2
      down "$(basename "$f" .env)"
    fi
  done
}

cmd=${1:-}
case "$cmd" in
  up) up "${2:-skz}" ;;
  env) load "${2:-skz}"; cat "$(state_file "${2:-skz}")" ;;
  stats) stats "${2:-skz}" ;;
  down) down "${2:-skz}" ;;
  gc) gc ;;
  check) need_root; need_nft; probe; echo "zones.sh: this machine can have zones" ;;
  exec)
    [ $# -ge 4 ] || { echo "usage: $0 exec PREFIX ZONE CMD [ARG...]" >&2; exit 2; }
    check_prefix "$2"
    ns="$2-$3"
    shift 3
    exec ip netns exec "$ns" "$@"
    ;;
  *)
    echo "usage: $0 up|env|stats|down [PREFIX] | gc | check | exec PREFIX ZONE CMD..." >&2
    exit 2
    ;;
esac
