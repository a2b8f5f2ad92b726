"""Samples a few of skiffd's metrics every INTERVAL seconds until killed, one line each:
the time (Unix seconds) and name=value pairs. bench/compare.sh runs it beside (l), so that a
latency spike there can be matched with what the broker did at the time (an upload, a
snapshot, a WAL trim, producers paced).

usage: mtrace.py PORT INTERVAL OUT"""
import sys
import time
import urllib.request

NAMES = ("skiff_wal_retained_bytes", "skiff_wal_segments", "skiff_wal_fill_ratio",
         "skiff_wal_pending_bytes", "skiff_s3_upload_lag_bytes", "skiff_s3_uploads_total",
         "skiff_s3_view_snapshots_total", "skiff_produce_paced_seconds_total",
         "skiff_produce_pace_bytes_per_second", "skiff_back_pressure", "skiff_wal_commits_total",
         "skiff_cache_bytes")


def main():
    port, interval, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    with open(out, "w") as f:
        while True:
            t = time.time()
            try:
                text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port,
                                              timeout=5).read().decode()
            except OSError:
                time.sleep(interval)
                continue
            vals = {}
            for ln in text.splitlines():
                name, _, v = ln.partition(" ")
                if name in NAMES:
                    vals[name] = v
            f.write("%.3f %s\n" % (t, " ".join("%s=%s" % (k[6:], vals[k]) for k in NAMES
                                                if k in vals)))
            f.flush()
            time.sleep(max(0.0, interval - (time.time() - t)))


if __name__ == "__main__":
    main()
