#!/usr/bin/env python3
"""Request latency on the wire, from a tcpdump capture of a server's port:
each request's first packet to its response's first packet, per connection
(HTTP/1.1 without pipelining). A third measure beside the load
generators' own (docs/BENCHMARKS.md).

    tcpdump -i lo -s 96 -w /tmp/wire.pcap "tcp port $PORT" &  # during the run
    bench/wire-latency.py /tmp/wire.pcap $PORT
"""
import struct, sys
port = int(sys.argv[2])
f = open(sys.argv[1], 'rb')
gh = f.read(24)
magic, = struct.unpack('<I', gh[:4])
nano = magic == 0xa1b23c4d
link, = struct.unpack('<I', gh[20:24])
off = 14 if link == 1 else 16 if link == 113 else 4
pending = {}
lat = []
while True:
    h = f.read(16)
    if len(h) < 16: break
    ts, tu, incl, orig = struct.unpack('<IIII', h)
    data = f.read(incl)
    t = ts + tu / (1e9 if nano else 1e6)
    ip = data[off:]
    if len(ip) < 20 or ip[0] >> 4 != 4: continue
    ihl = (ip[0] & 15) * 4
    total, = struct.unpack('>H', ip[2:4])
    tcp = ip[ihl:]
    sport, dport = struct.unpack('>HH', tcp[:4])
    thl = (tcp[12] >> 4) * 4
    plen = total - ihl - thl
    if plen <= 0: continue
    if dport == port:
        pending.setdefault(sport, t)
    elif sport == port and dport in pending:
        lat.append(t - pending.pop(dport))
lat.sort()
n = len(lat)
q = lambda p: lat[min(n - 1, int(p * n))] * 1000
print(f"wire: requests={n} p50_ms={q(0.5):.2f} p99_ms={q(0.99):.2f} max_ms={lat[-1]*1000:.2f} over_10ms={100*sum(1 for x in lat if x>0.01)/n:.2f}% over_50ms={100*sum(1 for x in lat if x>0.05)/n:.2f}%")
