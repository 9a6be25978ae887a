# gsched doctor probe: one task per node of a `gctl doctor --probe` job (grun sets
# SLURMD_NODENAME and SLURM_NODEID; the job sets MASTER_PORT). Python's standard library
# only. Prints one line "GSCHED_PROBE {json}" with what this node saw:
#   - whether its training address is on one of its interfaces, that interface and MTU;
#   - for every other node: a small UDP datagram there and back (round trip, and the
#     peer's clock against ours), and one as large as our MTU allows with "don't
#     fragment" set (lost while small ones pass: an MTU mismatch on the path);
#   - free space on the paths asked about; the NCCL_SOCKET_IFNAME jobs get here.
#   probe.py NODES_JSON PATHS_JSON SECONDS     NODES_JSON: {"name": "training address"}
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

nodes = json.loads(sys.argv[1])
paths = json.loads(sys.argv[2])
seconds = float(sys.argv[3])
me = os.environ.get("SLURMD_NODENAME", socket.gethostname())
order = sorted(nodes)
base = int(os.environ.get("MASTER_PORT", "29500"))
port_of = {n: base + 1 + i for i, n in enumerate(order)}
addr = nodes.get(me, "")
out = {"node": me, "addr": addr, "peers": {}, "paths": {},
       "nccl_socket_ifname": os.environ.get("NCCL_SOCKET_IFNAME")}
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2


def iface_of(a):
    try:
        text = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=5).stdout
    except Exception:  # noqa: BLE001
        return None
    for line in text.splitlines():
        f = line.split()
        if len(f) > 3 and f[3].split("/")[0] == a:
            return f[1]
    return None


iface = iface_of(addr)
out["iface"] = iface
mtu = None
if iface:
    try:
        mtu = int(open("/sys/class/net/%s/mtu" % iface).read())
    except OSError:
        pass
out["mtu"] = mtu
for p in paths:
    try:
        u = shutil.disk_usage(p)
        out["paths"][p] = {"free": u.free, "total": u.total}
    except OSError as e:
        out["paths"][p] = {"error": e.strerror or str(e)}

sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    sock.bind((addr, port_of[me]))
except OSError as e:
    out["bind_error"] = "%s:%d: %s" % (addr, port_of[me], e.strerror or e)
    print("GSCHED_PROBE " + json.dumps(out), flush=True)
    time.sleep(seconds)
    sys.exit(0)
try:
    sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
except OSError:
    pass
sock.settimeout(0.2)
replies = {}
lock = threading.Lock()
end = time.time() + seconds


def serve():
    while time.time() < end:
        try:
            data, peer = sock.recvfrom(65535)
        except socket.timeout:
            continue
        except OSError:
            continue
        if data.startswith(b"PING "):
            tag = data[5:].split(b" ", 1)[0]
            try:
                sock.sendto(b"PONG %s %d %d" % (tag, time.time_ns(), len(data)), peer)
            except OSError:
                pass
        elif data.startswith(b"PONG "):
            f = data.split()
            with lock:
                replies[f[1].decode()] = (time.time_ns(), int(f[2]), int(f[3]))


threading.Thread(target=serve, daemon=True).start()
time.sleep(min(2.0, seconds / 4))


def ping(peer, size, tag):
    """Round trip in ms and the peer's clock minus ours, or why not."""
    for attempt in range(5):
        t = "%s.%d" % (tag, attempt)
        msg = b"PING " + t.encode() + b" "
        msg += b"x" * max(0, size - len(msg))
        t0 = time.time_ns()
        try:
            sock.sendto(msg, (nodes[peer], port_of[peer]))
        except OSError as e:
            return None, "send: %s" % (e.strerror or e)
        deadline = time.time() + 0.3
        while time.time() < deadline:
            with lock:
                got = replies.pop(t, None)
            if got:
                t1, theirs, n = got
                rtt = t1 - t0
                return {"rtt_ms": rtt / 1e6, "offset_ms": (theirs - (t0 + rtt / 2)) / 1e6, "bytes": n}, None
            time.sleep(0.005)
    return None, "no answer"


big = min((mtu or 1500) - 28, 65000)
for peer in order:
    if peer == me:
        continue
    small, why = ping(peer, 64, "%s-s-%s" % (me, peer))
    large, why_big = ping(peer, big, "%s-b-%s" % (me, peer))
    out["peers"][peer] = {"small": small, "small_error": why, "large": large,
                          "large_error": why_big, "large_bytes": big}
print("GSCHED_PROBE " + json.dumps(out), flush=True)
while time.time() < end:
    time.sleep(0.1)
