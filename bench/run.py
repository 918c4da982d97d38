#!/usr/bin/env python3
"""Benchmarks of `tether run` against `tether-dev simulate`, side by side with the
bleak peer (bench/peer_bleak.py). Standard library only; `make bench` runs it.

    bench/run.py [footprint|ingest|keepalive|recovery|startup|forward|metrics|waiting|package ...]

Environment: TETHER_BIN, TETHER_DEV_BIN (default: tether-dev next to
TETHER_BIN), PEER_PYTHON, BENCH_OUT (default .build/bench),
BENCH_FOOTPRINT_DURATION (60s), BENCH_IDLE_DURATION (20s),
BENCH_INGEST_DURATION (60s), BENCH_INGEST_RATES (2000,20000),
BENCH_NOTIFY_PATHS (start-notify,acquire-notify: ingest runs both sides with each),
BENCH_KEEPALIVE_DURATION (10m), BENCH_KEEPALIVE_RATE (20000), BENCH_DROPS (50), BENCH_DROP_SPACING (11s),
BENCH_STARTUP_RUNS (10), BENCH_FORWARD_DURATION (20s), BENCH_METRICS_DURATION (30s),
BENCH_WAITING_DURATION (60s). Prints one table per
benchmark and merges the figures into BENCH_OUT/results.json. Asserts nothing.
"""

import getpass
import glob
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TETHER_BIN") or os.path.join(ROOT, ".build/release/tether")
# The simulator is in the development tools, built next to tether.
DEV_BIN = os.environ.get("TETHER_DEV_BIN") or os.path.join(os.path.dirname(BIN), "tether-dev")
PEER_PY = os.environ.get("PEER_PYTHON") or os.path.join(ROOT, ".build/bench-venv/bin/python")
PEER = os.path.join(ROOT, "bench/peer_bleak.py")
OUT = os.environ.get("BENCH_OUT") or os.path.join(ROOT, ".build/bench")
DONGLE = "AA:BB:CC:DD:EE:FF"
RX = "6e400002-b5a3-f393-e0a9-e50e24dcca9e"
TICK = os.sysconf("SC_CLK_TCK")
SIDES = ("tether", "peer")
# The target: keep-alive gaps stay within interval + 50 ms under a 20,000/s stream.
KEEPALIVE_RATE = int(os.environ.get("BENCH_KEEPALIVE_RATE") or "20000")


def duration(name, default):
    text = os.environ.get(name) or default
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", text.strip())
    if not m:
        sys.exit(f"{name}: bad duration {text!r}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


PROCS = []


def spawn(argv, env=None, out=None):
    p = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdout=out or subprocess.DEVNULL,
                         stderr=subprocess.STDOUT if out else subprocess.DEVNULL, start_new_session=True)
    PROCS.append(p)
    return p


def stop(p, timeout=20):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    try:  # the process group: the simulator's dbus-daemon, anything left
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def stop_all(*_):
    for p in PROCS:
        stop(p, 5)
    if _:
        sys.exit(130)


def wait_for(pred, timeout, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return None


class Sim:
    def __init__(self, work, *args):
        os.makedirs(f"{work}/bus", exist_ok=True)
        self.events = f"{work}/events.jsonl"
        self.proc = spawn([DEV_BIN, "simulate", "--spawn-bus", f"{work}/bus", "--event-log", self.events, *args],
                          out=open(f"{work}/sim.log", "w"))
        path = f"{work}/bus/address"
        if not wait_for(lambda: os.path.exists(path) and open(path).read().endswith("\n"), 10):
            raise RuntimeError("simulator did not start")
        self.address = open(path).read().strip()
        wait_for(lambda: self.busctl("get-property", "io.tether.Simulator", "/io/tether/Simulator",
                                     "io.tether.Simulator1", "State", check=False), 10)

    def busctl(self, *args, check=True):
        r = subprocess.run(["busctl", f"--address={self.address}", *args], capture_output=True, text=True)
        if check and r.returncode:
            raise RuntimeError(f"busctl {args}: {r.stderr}")
        return r.stdout.strip() if r.returncode == 0 else None

    def knob(self, member, sig=None, *values):
        self.busctl("call", "io.tether.Simulator", "/io/tether/Simulator", "io.tether.Simulator1", member,
                    *([sig, *map(str, values)] if sig else []))

    def log(self):
        return read_events(self.events)

    def close(self):
        stop(self.proc)


def read_events(path):
    events = []
    with open(path, "rb") as f:
        data = f.read()
    for line in data.split(b"\n")[:-1]:
        if b'"ev":"notify"' in line:
            i = line.rindex(b'"seq":') + 6
            events.append({"ev": "notify", "t": float(line[5:line.index(b",")]), "seq": int(line[i:line.index(b"}", i)])})
        else:
            events.append(json.loads(line))
    return events


def disk_seqs(directory):
    """Dongle sequence numbers (payload bytes 0–3, little-endian) of the notify records on disk."""
    seqs = []
    if not os.path.isdir(directory):
        return seqs
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(directory, name), "rb") as f:
            for line in f:
                if b'"source":"notify"' not in line or not line.endswith(b"\n"):
                    continue
                i = line.index(b'"hex":"') + 7
                seqs.append(int.from_bytes(bytes.fromhex(line[i:i + 8].decode()), "little"))
    return seqs


def proc_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu(pid):
    """CPU seconds per thread from schedstat (nanoseconds; /proc/PID/stat
    counts 10 ms ticks, too coarse for an idle daemon)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0]) / 1e9
        except OSError:
            pass
    return out


def cpu_between(before, after):
    """CPU seconds spent between two `thread_cpu` samples: threads present in
    both count their difference, new ones all of theirs. A thread that ended
    in between is missed (a lower bound; libdispatch's workers come and go)."""
    return sum(t - before.get(tid, 0) for tid, t in after.items())


def proc_status(pid):
    out = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        if v.strip().endswith("kB"):
            out[k] = int(v.split()[0]) / 1024
    return out


def switches(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            n = 0
            for line in open(f"/proc/{pid}/task/{tid}/status"):
                if "ctxt_switches" in line:
                    n += int(line.split()[1])
            out[tid] = n
        except OSError:
            pass
    return out


class Side:
    """`tether run` or the bleak peer against one simulator."""

    def __init__(self, kind, work, sim, reconnect="", extra_env=None, keepalive=True, notify_path="start-notify",
                 mqtt_port=None, silence_off=False):
        self.kind, self.readings = kind, f"{work}/readings-{kind}"
        env = {"DBUS_SYSTEM_BUS_ADDRESS": sim.address, **(extra_env or {})}
        log = open(f"{work}/{kind}.log", "w")
        if kind == "tether":
            config = f"{work}/tether.toml"
            with open(config, "w") as f:
                # The idle figures stop the notifications on purpose: with
                # the silence limit on, that is a hung dongle to reconnect.
                silence = 'silence_limit = "off"\n' if silence_off and supports_silence_limit() else ""
                f.write(f'[dongle]\naddress = "{DONGLE}"\nnotify_path = "{notify_path}"\n{silence}'
                        f'[keepalive]\nenabled = {str(keepalive).lower()}\n'
                        f'interval = "1s"\ntimeout = "800ms"\n'
                        f'sleep_after = "3s"\n[readings]\ndirectory = "{self.readings}"\n{reconnect}')
            self.proc = spawn([BIN, "run", "--config", config], env, log)
        else:
            acquire = ["--acquire-notify"] if notify_path == "acquire-notify" else []
            forward = ["--mqtt", f"127.0.0.1:{mqtt_port}"] if mqtt_port else []
            self.argv = [PEER_PY, PEER, "--address", DONGLE, "--out", self.readings, "--interval", "1", *acquire, *forward]
            self.env, self.log = env, log
            self.proc = spawn(self.argv, env, log)
        self.pid = self.proc.pid

    def restart(self):
        """The peer again, after a SIGKILL (the forwarding benchmark's kills)."""
        self.proc = spawn(self.argv, self.env, self.log)
        self.pid = self.proc.pid

    def stop(self):
        stop(self.proc)
        return self.proc.returncode


_SILENCE_LIMIT = []


def supports_silence_limit():
    """Whether BIN knows dongle.silence_limit (issue 19): an older binary
    would reject the key, so before-and-after runs write it only where it exists."""
    if not _SILENCE_LIMIT:
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
            f.write(f'[dongle]\naddress = "{DONGLE}"\nsilence_limit = "off"\n')
            f.flush()
            _SILENCE_LIMIT.append(subprocess.run([BIN, "check-config", f.name], capture_output=True).returncode == 0)
    return _SILENCE_LIMIT[0]


def wait_subscribed(sim, after=0, timeout=30):
    """Waits for a start-notify or an acquired socket in the simulator's log
    (a new client subscribed)."""
    ok = wait_for(lambda: sum(e["ev"] in ("start-notify", "notify-socket-ready") for e in sim.log()) > after, timeout)
    if not ok:
        raise RuntimeError("no subscription within %ss" % timeout)
    time.sleep(0.3)


def in_parallel(fn, *argss):
    results, errors = [None] * len(argss), []

    def run(i, args):
        try:
            results[i] = fn(*args)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(argss)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def pct(values, p):
    values = sorted(values)
    if not values:
        return None
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def workdir(name):
    return tempfile.mkdtemp(prefix=f"tether-bench-{name}-")


# MARK: benchmarks

def footprint_side(kind, keepalive=True):
    seconds, idle = duration("BENCH_FOOTPRINT_DURATION", "60s"), duration("BENCH_IDLE_DURATION", "20s")
    work = workdir("footprint")
    sim = Sim(work, "--notify-rate", "10", "--sleep-after", "3s" if keepalive else "1h")
    side = Side(kind, work, sim, keepalive=keepalive, silence_off=True)
    try:
        wait_subscribed(sim)
        cpu0 = proc_cpu(side.pid)
        time.sleep(seconds)
        cpu1, status = proc_cpu(side.pid), proc_status(side.pid)
        sim.knob("SetNotifyRate", "d", 0)
        time.sleep(2)
        sw0, idle0 = switches(side.pid), thread_cpu(side.pid)
        time.sleep(idle)
        sw1, idle1 = switches(side.pid), thread_cpu(side.pid)
        wake = sum(n - sw0.get(t, 0) for t, n in sw1.items()) / idle
        return {"online_seconds": seconds, "vmhwm_mib": status["VmHWM"], "vmrss_mib": status["VmRSS"],
                "rss_anon_mib": status.get("RssAnon"), "rss_file_mib": status.get("RssFile"),
                "cpu_seconds": cpu1 - cpu0, "idle_wakeups_per_s": wake, "threads": len(sw1),
                "idle_cpu_ms_per_minute": cpu_between(idle0, idle1) * 1000 * 60 / idle}
    finally:
        side.stop()
        sim.close()
        shutil.rmtree(work, ignore_errors=True)


def waiting_side(kind, others=80, interval="200ms"):
    """The dongle away (asleep) in a busy street: `others` other advertisers,
    each reported every `interval` (80 at 5/s: 400 reports a second), while
    the side waits for the dongle. CPU a minute once it waits (Tether: from
    its `event=away`, or cooling down where nothing shows that the
    controller works; the peer: from its first failed connect), then the
    wake: how long until it is online again."""
    seconds = duration("BENCH_WAITING_DURATION", "60s")
    work = workdir("waiting")
    sim = Sim(work, "--notify-rate", "10", "--sleep-after", "3s", "--no-answer-timeout", "3s",
              "--other-advertisers", str(others), "--other-advertising-interval", interval)
    reconnect = '[reconnect]\nwindow = "6s"\nwindow_attempts = 2\nconnect_timeout = "5s"\n'
    side = Side(kind, work, sim, reconnect=reconnect, silence_off=True)
    log = f"{work}/{kind}.log"
    # Tether waits once away (or, in a quiet place where nothing shows the
    # controller works, cooling down); the peer once a connect failed.
    marker = r"event=away|state=cooling-down" if kind == "tether" else "error"
    try:
        wait_subscribed(sim)
        asleep = time.monotonic()
        sim.knob("Sleep")
        if not wait_for(lambda: re.search(marker, open(log).read()), 90, 0.2):
            raise RuntimeError(f"{kind}: not waiting ({marker!r} not logged) within 90 s of the sleep")
        waiting_after = time.monotonic() - asleep
        time.sleep(5)
        before = thread_cpu(side.pid)
        time.sleep(seconds)
        after = thread_cpu(side.pid)
        online_mark = "state=online" if kind == "tether" else "online"
        lines_before = open(log).read().count(online_mark)
        woken = time.monotonic()
        sim.knob("Wake")
        back = wait_for(lambda: open(log).read().count(online_mark) > lines_before, 60, 0.02)
        return {"others": others, "interval": interval, "waiting_after_s": waiting_after,
                "waiting_cpu_ms_per_minute": cpu_between(before, after) * 1000 * 60 / seconds,
                "back_s": (time.monotonic() - woken) if back else None}
    finally:
        side.stop()
        sim.close()
        shutil.rmtree(work, ignore_errors=True)


def bench_waiting():
    t, p = in_parallel(waiting_side, ("tether",), ("peer",))
    quiet = waiting_side("tether", others=0)
    rows = [("waiting, CPU ms per minute (80 advertisers, 5/s each)", t["waiting_cpu_ms_per_minute"],
             p["waiting_cpu_ms_per_minute"], "≤ 20", t["waiting_cpu_ms_per_minute"] <= 20),
            ("  in a quiet place (no other advertiser), CPU ms per minute", quiet["waiting_cpu_ms_per_minute"],
             None, "", None),
            ("wake → online, s (busy street)", t["back_s"], p["back_s"], "≤ 2",
             t["back_s"] is not None and t["back_s"] <= 2),
            ("Tether away / the peer retrying, s after the sleep", t["waiting_after_s"], p["waiting_after_s"], "", None)]
    table("Waiting for a dongle that is away (asleep) in a busy street; both at once, one simulator each", rows)
    return {"tether": t, "peer": p, "tether_quiet": quiet}


def pss_kib(pid):
    """Proportional set size: shared pages (the binary, libraries) divided
    among the processes mapping them; what one more instance costs."""
    for line in open(f"/proc/{pid}/smaps_rollup"):
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def footprint_instances(kind, count=4):
    """`count` instances side by side (as `tether@NAME` units run, one per
    dongle), each with its own simulator: their PSS summed, after
    BENCH_PSS_DURATION online."""
    seconds = duration("BENCH_PSS_DURATION", "30s")
    works, sims, sides = [], [], []
    try:
        for _ in range(count):
            work = workdir("pss")
            works.append(work)
            sim = Sim(work, "--notify-rate", "10", "--sleep-after", "3s")
            sims.append(sim)
            sides.append(Side(kind, work, sim, silence_off=True))
        for sim in sims:
            wait_subscribed(sim)
        time.sleep(seconds)
        pss = [pss_kib(side.pid) for side in sides]
        return {"instances": count, "pss_total_mib": sum(pss) / 1024, "pss_each_mib": [x / 1024 for x in pss],
                "rss_each_mib": [proc_status(side.pid)["VmRSS"] for side in sides]}
    finally:
        for side in sides:
            side.stop()
        for sim in sims:
            sim.close()
        for work in works:
            shutil.rmtree(work, ignore_errors=True)


def recache_in_small_pages(path):
    """Drops `path` from the page cache and reads it back a page at a time
    with readahead off, so the cache holds it in 4 KiB pages. A kernel with
    large folios for ext4 (6.1x here) keeps a freshly written binary in folios
    of up to 2 MiB and maps a whole folio where the process touched one page
    of it; Debian 12's 6.1 kernel caches ext4 files in 4 KiB pages and maps
    64 KiB around a fault. Nothing may map the file meanwhile."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for offset in range(0, os.fstat(fd).st_size, 4096):
            os.pread(fd, 4096, offset)
    finally:
        os.close(fd)


def wake_floor(seconds):
    """bench/wake_floor.c's figure: the CPU a minute that the keep-alive's
    two wake-ups a second (a timer, then a reply) cost on this machine with
    no work between them, the floor under the idle figure."""
    swift = shutil.which("swift")
    compiler = shutil.which("cc") or (swift and os.path.join(os.path.dirname(os.path.realpath(swift)), "clang"))
    if not compiler:
        return None
    os.makedirs(OUT, exist_ok=True)
    binary = os.path.join(OUT, "wake_floor")
    built = subprocess.run([compiler, "-O2", "-o", binary, os.path.join(ROOT, "bench/wake_floor.c")],
                           capture_output=True, text=True)
    if built.returncode != 0:
        print(f"wake_floor: {compiler} failed: {built.stderr.strip()}", file=sys.stderr)
        return None
    # Exit status 1: a round trip went unanswered; its figures still stand.
    out = subprocess.run([binary, str(max(1, round(seconds)))], capture_output=True, text=True).stdout
    return json.loads(out) if out.strip() else None


def bench_footprint():
    # The floor is measured in the sides' idle window, under the same load.
    floor = {}
    online, idle = duration("BENCH_FOOTPRINT_DURATION", "60s"), duration("BENCH_IDLE_DURATION", "20s")

    def measure_floor():
        time.sleep(online + 4)
        floor["figures"] = wake_floor(idle - 2)
    floor_thread = threading.Thread(target=measure_floor)
    floor_thread.start()
    t, p = in_parallel(footprint_side, ("tether",), ("peer",))
    floor_thread.join()
    floor = floor.get("figures") or {}
    off = footprint_side("tether", keepalive=False)
    recache_in_small_pages(BIN)
    small = footprint_side("tether")
    t4, p4 = footprint_instances("tether"), footprint_instances("peer")
    rows = [("RSS after %gs online (VmHWM), MiB" % t["online_seconds"], t["vmhwm_mib"], p["vmhwm_mib"], "≤ 9",
             t["vmhwm_mib"] <= 9),
            ("  of it anonymous (RssAnon), MiB", t["rss_anon_mib"], p["rss_anon_mib"], "", None),
            ("  the same, binary cached in 4 KiB pages as Debian 12's kernel does (kernel here %s), MiB"
             % os.uname().release, small["vmhwm_mib"], None, "≤ 9", small["vmhwm_mib"] <= 9),
            ("CPU seconds over that time", t["cpu_seconds"], p["cpu_seconds"], "", None),
            ("idle CPU ms per minute (keep-alive 1 s, no notifications)", t["idle_cpu_ms_per_minute"],
             p["idle_cpu_ms_per_minute"], "≤ 10", t["idle_cpu_ms_per_minute"] <= 10),
            ("  the floor: a timer wake-up and a reply wake-up a second, no work (bench/wake_floor.c), ms per minute",
             floor.get("cpu_ms_per_minute"), None, "", None),
            ("wake-ups/s idle, all threads (keep-alive 1 s, no notifications)", t["idle_wakeups_per_s"],
             p["idle_wakeups_per_s"], "≤ 4", t["idle_wakeups_per_s"] <= 4),
            ("wake-ups/s idle, keep-alive off", off["idle_wakeups_per_s"], None, "≤ 1", off["idle_wakeups_per_s"] <= 1),
            ("PSS of 4 instances side by side (sum), MiB", t4["pss_total_mib"], p4["pss_total_mib"], "", None),
            ("  RSS of each of the 4, MiB", max(t4["rss_each_mib"]), max(p4["rss_each_mib"]), "", None)]
    table("Footprint (keep-alive 1 s, 10 notifications/s; both run at once, one simulator each)", rows)
    return {"tether": t, "peer": p, "tether_keepalive_off": off, "tether_small_pages": small, "tether_4": t4, "peer_4": p4,
            "wake_floor": floor}


def bus_daemon_pid(sim):
    """The dbus-daemon the simulator spawned (its child), or None."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            if int(fields[1]) == sim.proc.pid and open(f"/proc/{pid}/comm").read().strip() == "dbus-daemon":
                return int(pid)
        except OSError:
            pass
    return None


def ingest_once(kind, rate, seconds, notify_path):
    work = workdir("ingest")
    sim = Sim(work, "--notify-rate", "0")
    side = Side(kind, work, sim, notify_path=notify_path)
    try:
        wait_subscribed(sim)
        bus = bus_daemon_pid(sim)
        cpu0, bus0, sw0 = proc_cpu(side.pid), bus and proc_cpu(bus), switches(side.pid)
        sim.knob("SetNotifyRate", "d", rate)
        time.sleep(seconds)
        sim.knob("SetNotifyRate", "d", 0)
        time.sleep(2.5)
        alive = side.proc.poll() is None
        cpu1 = proc_cpu(side.pid) if alive else None
        bus1 = bus and proc_cpu(bus)
        sw1 = switches(side.pid) if alive else {}
        ctx = sum(n - sw0.get(t, 0) for t, n in sw1.items())
        rc = side.stop()
        log = sim.log()
        sent = [e["seq"] for e in log if e["ev"] == "notify"]
        # With AcquireNotify bluetoothd drops what a reader cannot take in time
        # (its end of the socket does not block): sent, but lost all the same.
        dropped = sum(e["ev"] == "notify-dropped" for e in log)
        disk = disk_seqs(side.readings)
        lost, dups = len(set(sent) - set(disk)) + dropped, len(disk) - len(set(disk))
        achieved = len(sent) / seconds
        ok = alive and rc == 0 and lost == 0 and dups == 0 and achieved >= 0.95 * rate
        n = max(1, len(disk))
        cpu = (cpu1 - cpu0) * 1e6 / n if cpu1 is not None else None
        # dbus-daemon routes every signal the simulator sends to each match:
        # its CPU per reading is what the D-Bus hop costs (the simulator's
        # own sending is not counted anywhere here).
        bus_cpu = (bus1 - bus0) * 1e6 / n if bus and bus1 is not None else None
        return {"rate": rate, "notify_path": notify_path, "sent": len(sent), "dropped_by_bluetoothd": dropped, "achieved_per_s": achieved, "on_disk": len(disk), "lost": lost,
                "duplicates": dups, "exit": rc, "ok": ok, "cpu_us_per_reading": cpu,
                "dbus_daemon_cpu_us_per_reading": bus_cpu,
                "system_cpu_us_per_reading": cpu + bus_cpu if cpu is not None and bus_cpu is not None else None,
                "context_switches_per_reading": ctx / n if alive else None}
    finally:
        stop(side.proc)
        sim.close()
        shutil.rmtree(work, ignore_errors=True)


def bench_ingest():
    """Both sides with each notify path: StartNotify (every notification a
    PropertiesChanged through dbus-daemon) and AcquireNotify (a socket from
    bluetoothd; dbus-daemon out of the path)."""
    seconds = duration("BENCH_INGEST_DURATION", "60s")
    rates = [float(r) for r in (os.environ.get("BENCH_INGEST_RATES") or "2000,20000").split(",")]
    paths = (os.environ.get("BENCH_NOTIFY_PATHS") or "start-notify,acquire-notify").split(",")
    out = {}
    for path in paths:
        result = {}
        for kind in SIDES:
            runs = []
            for rate in rates:
                r = ingest_once(kind, rate, seconds, path)
                runs.append(r)
                print(f"  ingest {kind} {path} {rate:g}/s: sent {r['sent']} ({r['achieved_per_s']:.0f}/s), lost {r['lost']} "
                      f"(bluetoothd dropped {r['dropped_by_bluetoothd']}), dup {r['duplicates']}, "
                      f"{r['cpu_us_per_reading'] or 0:.1f} µs CPU/reading "
                      f"(+ dbus-daemon {r['dbus_daemon_cpu_us_per_reading'] or 0:.1f}), "
                      f"{r['context_switches_per_reading'] or 0:.2f} context switches/reading, {'ok' if r['ok'] else 'FAIL'}",
                      flush=True)
                if not r["ok"]:
                    break
            best = max((r for r in runs if r["ok"]), key=lambda r: r["rate"], default=None)
            result[kind] = {"runs": runs, "best_rate": best and best["rate"],
                            "cpu_us_per_reading_at_best": best and best["cpu_us_per_reading"]}
        t, p = result["tether"], result["peer"]
        rows = [("highest rate for %gs with no loss, /s" % seconds, t["best_rate"], p["best_rate"], "≥ 5000",
                 (t["best_rate"] or 0) >= 5000)]
        for rate in rates:
            tr = next((r for r in t["runs"] if r["rate"] == rate), None)
            pr = next((r for r in p["runs"] if r["rate"] == rate), None)
            if not tr or not pr:
                continue
            tcpu, pcpu = tr["cpu_us_per_reading"], pr["cpu_us_per_reading"]
            system_goal = "≤ 10" if path == "acquire-notify" and rate == 2000 else ""
            rows += [("daemon CPU µs per reading at %g/s (lost/doubled %d/%d vs %d/%d)" % (
                          rate, tr["lost"], tr["duplicates"], pr["lost"], pr["duplicates"]),
                      tcpu, pcpu, "≤ peer/5", bool(tcpu and pcpu and tcpu <= pcpu / 5 and tr["ok"])),
                     ("  + dbus-daemon's CPU µs per reading (the D-Bus hop)", tr["dbus_daemon_cpu_us_per_reading"],
                      pr["dbus_daemon_cpu_us_per_reading"], "", None),
                     ("  = daemon + dbus-daemon CPU µs per reading (simulator excluded)", tr["system_cpu_us_per_reading"],
                      pr["system_cpu_us_per_reading"], system_goal,
                      (tr["system_cpu_us_per_reading"] or 99) <= 10 and tr["ok"] if system_goal else None),
                     ("  context switches per reading, all threads", tr["context_switches_per_reading"],
                      pr["context_switches_per_reading"], "≤ 0.2" if rate == 2000 else "",
                      (tr["context_switches_per_reading"] or 9) <= 0.2 if rate == 2000 else None)]
        table("Ingest with %s (rates tried: %s)" % (path, ", ".join(f"{r:g}" for r in rates)), rows)
        out[path] = result
    return out


def keepalive_side(kind, seconds):
    work = workdir("keepalive")
    sim = Sim(work, "--notify-rate", str(KEEPALIVE_RATE), "--sleep-after", "3s")
    side = Side(kind, work, sim)
    try:
        wait_subscribed(sim)
        t0 = sim.log()[-1]["t"]
        time.sleep(seconds)
        events = sim.log()
        writes = [e["t"] for e in events if e["ev"] == "write" and e.get("uuid") == RX and e["t"] >= t0]
        gaps = [b - a for a, b in zip(writes, writes[1:])]
        drops = sum(e["ev"] == "disconnected" for e in events)
        return {"seconds": seconds, "polls": len(writes), "gap_max_ms": max(gaps), "gap_p99_ms": pct(gaps, 99),
                "gap_median_ms": pct(gaps, 50), "gap_min_ms": min(gaps), "disconnects": drops,
                "notifications": sum(e["ev"] == "notify" for e in events)}
    finally:
        side.stop()
        sim.close()
        shutil.rmtree(work, ignore_errors=True)


def bench_keepalive():
    seconds = duration("BENCH_KEEPALIVE_DURATION", "10m")
    t, p = (keepalive_side(k, seconds) for k in SIDES)
    rows = [("polls", t["polls"], p["polls"], "", None),
            ("gap max, ms", t["gap_max_ms"], p["gap_max_ms"], "≤ 1050", t["gap_max_ms"] <= 1050),
            ("gap p99, ms", t["gap_p99_ms"], p["gap_p99_ms"], "", None),
            ("gap median, ms", t["gap_median_ms"], p["gap_median_ms"], "", None),
            ("gap min, ms", t["gap_min_ms"], p["gap_min_ms"], "", None),
            ("link drops (dongle asleep)", t["disconnects"], p["disconnects"], "0", t["disconnects"] == 0)]
    table("Keep-alive precision (1 s interval, %gs, %d notifications/s; one after the other)" % (seconds, KEEPALIVE_RATE), rows)
    return {"tether": t, "peer": p}


def recovery_side(kind, drops, spacing):
    work = workdir("recovery")
    sim = Sim(work, "--notify-rate", "1000", "--no-answer-timeout", "3s")
    reconnect = '[reconnect]\nwindow = "6s"\nwindow_attempts = 2\n'
    side = Side(kind, work, sim, reconnect=reconnect)
    out = {}
    try:
        wait_subscribed(sim)
        for _ in range(drops):
            time.sleep(spacing)
            sim.knob("DropLink", "s", "link-loss")
        time.sleep(2)
        # Wake after an exhausted retry window (the peer has none: it retries every second).
        sim.knob("Sleep")
        if kind == "tether":
            state = lambda: sim.busctl("get-property", "io.tether.Tether", "/io/tether/Tether", "io.tether.Tether1",
                                       "State", check=False)
            waited = wait_for(lambda: "cooling-down" in (state() or ""), 60, 0.2)
            out["cooling_down_reached"] = bool(waited)
        else:
            time.sleep(12)
        time.sleep(6)  # advertising silence before the wake
        sim.knob("Wake")
        time.sleep(8)
        events = sim.log()
        side.stop()
        disk = set(disk_seqs(side.readings))
        lat, wake = [], None
        for i, e in enumerate(events):
            if e["ev"] == "disconnected" and e.get("reason") == "link-loss" or e["ev"] == "wake":
                # The first reading of the next link (notifications sent just
                # before the drop can be logged just after it).
                up = next((j for j in range(i + 1, len(events)) if events[j]["ev"] == "connected"), None)
                if up is None:
                    continue
                first = next((n for n in events[up + 1:] if n["ev"] == "notify" and n["seq"] in disk), None)
                if first is None:
                    continue
                if e["ev"] == "wake":
                    wake = first["t"] - e["t"]
                else:
                    lat.append(first["t"] - e["t"])
        out.update({"drops": drops, "recovered": len(lat), "drop_to_reading_median_ms": pct(lat, 50),
                    "drop_to_reading_p95_ms": pct(lat, 95), "drop_to_reading_max_ms": max(lat, default=None),
                    "wake_to_reading_ms": wake})
        return out
    finally:
        stop(side.proc)
        sim.close()
        shutil.rmtree(work, ignore_errors=True)


def bench_recovery():
    drops, spacing = int(os.environ.get("BENCH_DROPS") or 50), duration("BENCH_DROP_SPACING", "11s")
    t, p = in_parallel(recovery_side, ("tether", drops, spacing), ("peer", drops, spacing))
    goal = 30 + 20 + 100
    rows = [("drops recovered", t["recovered"], p["recovered"], str(drops), t["recovered"] == drops),
            ("drop → first reading, median ms", t["drop_to_reading_median_ms"], p["drop_to_reading_median_ms"],
             f"≤ {goal}", (t["drop_to_reading_median_ms"] or 1e9) <= goal),
            ("drop → first reading, p95 ms", t["drop_to_reading_p95_ms"], p["drop_to_reading_p95_ms"], "", None),
            ("drop → first reading, max ms", t["drop_to_reading_max_ms"], p["drop_to_reading_max_ms"], "", None),
            ("wake → first reading (window exhausted), ms", t["wake_to_reading_ms"], p["wake_to_reading_ms"], "≤ 2000",
             (t["wake_to_reading_ms"] or 1e9) <= 2000)]
    table(f"Recovery ({drops} DropLink every {spacing:g}s, connect 30 ms + resolve 20 ms, 1000 notifications/s; "
          "both at once, one simulator each)", rows)
    return {"tether": t, "peer": p, "goal_median_ms": goal}


def bench_startup():
    runs = int(os.environ.get("BENCH_STARTUP_RUNS") or 10)
    ready, subscribed = [], {k: [] for k in SIDES}
    for i in range(runs):
        for kind in SIDES:
            work = workdir("startup")
            sim = Sim(work, "--notify-rate", "100")
            sock_path = f"{work}/notify.sock"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(sock_path)
            sock.settimeout(10)
            t0 = time.monotonic()
            side = Side(kind, work, sim, extra_env={"NOTIFY_SOCKET": sock_path})
            try:
                if kind == "tether":
                    while True:
                        msg = sock.recv(4096).decode()
                        if "READY=1" in msg.split("\n"):
                            ready.append((time.monotonic() - t0) * 1000)
                            break
                if wait_for(lambda: os.path.getsize(sim.events) and b"start-notify" in open(sim.events, "rb").read(),
                            30, 0.002):
                    subscribed[kind].append((time.monotonic() - t0) * 1000)
            finally:
                side.stop()
                sim.close()
                sock.close()
                shutil.rmtree(work, ignore_errors=True)
    rows = [("start → READY=1, median ms", pct(ready, 50), None, "", None),
            ("start → READY=1, min–max ms", f"{min(ready):.0f}–{max(ready):.0f}", None, "", None),
            ("start → subscribed (StartNotify at the simulator), median ms", pct(subscribed["tether"], 50),
             pct(subscribed["peer"], 50), "", None)]
    table(f"Start-up ({runs} runs each, release binary, fresh simulator each run)", rows)
    return {"tether": {"ready_ms": ready, "subscribed_ms": subscribed["tether"]}, "peer": {"subscribed_ms": subscribed["peer"]}}


# MARK: forwarding (tether forward against Debian's mosquitto)

MOSQUITTO = "/usr/sbin/mosquitto"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


class Broker:
    """Debian's mosquitto on a free loopback port: persistence on (a restart
    keeps the subscriber's session), no limit on queued messages."""

    def __init__(self, work):
        self.work, self.port = work, free_port()
        self.conf = f"{work}/mosquitto.conf"
        with open(self.conf, "w") as f:
            f.write(f"user {getpass.getuser()}\nlistener {self.port} 127.0.0.1\nallow_anonymous true\n"
                    f"persistence true\npersistence_location {work}/\nmax_queued_messages 0\n"
                    f"log_dest file {work}/mosquitto.log\n")
        self.start()

    def start(self):
        self.proc = spawn([MOSQUITTO, "-c", self.conf])
        if not wait_for(lambda: accepts(self.port), 5):
            raise RuntimeError("mosquitto did not start")

    def stop(self):
        stop(self.proc)


class Subscriber:
    """mosquitto_sub with a persistent QoS 1 session, everything to one file."""

    def __init__(self, work, port):
        self.path, self.port, self.offset, self.seqs = f"{work}/received.txt", port, 0, []
        self.start()

    def start(self):
        self.proc = spawn(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(self.port), "-t", "#", "-q", "1", "-c",
                           "-i", "bench-subscriber"], out=open(self.path, "ab"))
        time.sleep(0.3)

    def stop(self):
        stop(self.proc)

    def received(self):
        """Dongle sequence numbers received so far, in arrival order (batched
        payloads are one record per line)."""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].split(b"\n"):
            if b'"source":"notify"' in line:
                i = line.index(b'"hex":"') + 7
                self.seqs.append(int.from_bytes(bytes.fromhex(line[i:i + 8].decode()), "little"))
        return self.seqs


class TetherForward:
    """`tether forward` on the config `Side` wrote, its cursor in work/state."""

    def __init__(self, work, state="state"):
        self.work, self.state = work, f"{work}/{state}"
        os.makedirs(self.state, exist_ok=True)
        self.start()

    def start(self):
        self.proc = spawn([BIN, "forward", "--config", f"{self.work}/tether.toml", "--state-directory", self.state],
                          out=open(f"{self.work}/forward.log", "a"))
        self.pid = self.proc.pid

    def cursor(self):
        try:
            return int(open(f"{self.state}/cursor").read())
        except (OSError, ValueError):
            return 0

    def connected(self):
        """What its status file (tether status's source) says."""
        try:
            return json.load(open(f"{self.state}/status.json"))["connected"]
        except (OSError, ValueError, KeyError):
            return False


def last_seq_on_disk(directory):
    """The log's newest complete record's seq (its own, not the dongle's),
    from the last 64 KiB of the newest non-empty file."""
    names = sorted(n for n in os.listdir(directory) if n.endswith(".jsonl"))
    for name in reversed(names):
        with open(os.path.join(directory, name), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().split(b"\n")[:-1]
        if lines:
            line = lines[-1]
            i = line.index(b'"seq":') + 6
            return int(line[i:line.index(b",", i)])
    return 0


def mqtt_config(port, batch):
    return f'[mqtt]\nurl = "mqtt://127.0.0.1:{port}"\nbatch = {batch}\n'


class ForwardRig:
    """One side of a forwarding benchmark, as a context manager: a simulator
    (silent until told), mosquitto, a persistent subscriber, and either
    `tether run` + `tether forward` (batch `batch`) or the peer with --mqtt;
    `start_forwarder=False` leaves `tether forward` to be started later."""

    def __init__(self, kind, name, batch=1, start_forwarder=True):
        self.kind, self.work = kind, workdir(name)
        self.sim = Sim(self.work, "--notify-rate", "0")
        self.broker = Broker(self.work)
        self.sub = Subscriber(self.work, self.broker.port)
        tether = kind == "tether"
        self.side = Side(kind, self.work, self.sim, reconnect=mqtt_config(self.broker.port, batch) if tether else "",
                         mqtt_port=None if tether else self.broker.port)
        self.fwd = TetherForward(self.work) if tether and start_forwarder else None

    def __enter__(self):
        try:
            wait_subscribed(self.sim)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_):
        for p in ([self.fwd.proc] if self.fwd else []) + [self.side.proc, self.sub.proc, self.broker.proc]:
            stop(p)
        self.sim.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def sent(self):
        return {e["seq"] for e in self.sim.log() if e["ev"] == "notify"}

    def wait_received(self, seqs, timeout, step=0.1):
        return wait_for(lambda: seqs <= set(self.sub.received()), timeout, step)

    def delivery(self):
        sent = [e["seq"] for e in self.sim.log() if e["ev"] == "notify"]
        got = self.sub.received()
        return {"sent": len(sent), "received": len(got), "lost": len(set(sent) - set(got)),
                "duplicates": len(got) - len(set(got))}


def forward_live(kind, rate, batch, seconds):
    """Both sides at `rate` for `seconds`: every reading to the broker while
    it comes in. CPU per reading of the forwarding (tether forward alone; the
    peer is one process) and of the whole side, the broker's, Tether's
    backlog while it runs, and how long after the stream stopped the last
    reading arrived."""
    with ForwardRig(kind, "forward", batch) as rig:
        time.sleep(0.5)
        pids = {"side": rig.side.pid, "broker": rig.broker.proc.pid, **({"forwarder": rig.fwd.pid} if rig.fwd else {})}
        cpu0 = {k: proc_cpu(p) for k, p in pids.items()}
        rig.sim.knob("SetNotifyRate", "d", rate)
        # Tether's backlog (records on disk not yet acknowledged), sampled:
        # a forwarder that keeps up holds it to what a fraction of a second brings.
        backlog, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.5)
            if rig.fwd:
                try:
                    backlog.append(max(0, last_seq_on_disk(rig.side.readings) - rig.fwd.cursor()))
                except (OSError, ValueError):
                    pass
        rig.sim.knob("SetNotifyRate", "d", 0)
        stopped = time.monotonic()
        arrived = rig.wait_received(rig.sent(), 20, 0.05)
        lag = time.monotonic() - stopped if arrived else None
        cpu1 = {k: proc_cpu(p) for k, p in pids.items()}
        d = rig.delivery()
        n = max(1, d["sent"])
        cpu = {k: (cpu1[k] - cpu0[k]) * 1e6 / n for k in pids}
        return {**d, "rate": rate, "batch": batch, "achieved_per_s": d["sent"] / seconds, "last_arrival_after_s": lag,
                "backlog_max": max(backlog, default=None), "backlog_median": pct(backlog, 50),
                "forwarding_cpu_us_per_reading": cpu.get("forwarder", cpu["side"]),
                "side_cpu_us_per_reading": cpu["side"] + cpu.get("forwarder", 0),
                "broker_cpu_us_per_reading": cpu["broker"]}


def forward_outage(kind, rate=1000, down=10):
    """The broker stopped for `down` seconds at `rate`, then started again:
    the time from its return until every reading sent before it returned has
    arrived, and what was lost or doubled overall."""
    with ForwardRig(kind, "forward-outage") as rig:
        time.sleep(0.5)
        rig.sim.knob("SetNotifyRate", "d", rate)
        time.sleep(3)
        rig.sub.stop()
        rig.broker.stop()
        time.sleep(down)
        rig.broker.start()
        returned = time.monotonic()
        rig.sub.start()
        target = rig.sent()
        reconnected = []

        def arrived():
            if rig.fwd and not reconnected and rig.fwd.connected():
                reconnected.append(time.monotonic() - returned)
            return target <= set(rig.sub.received())
        caught_up = wait_for(arrived, 120, 0.02)
        catch_up = time.monotonic() - returned if caught_up else None
        time.sleep(3)
        rig.sim.knob("SetNotifyRate", "d", 0)
        rig.wait_received(rig.sent(), 60)
        return {**rig.delivery(), "rate": rate, "down_s": down, "return_to_caught_up_s": catch_up,
                "return_to_reconnected_s": reconnected[0] if reconnected else None}


def forward_kills(kind, rate=1000, kills=5, spacing=2.0):
    """SIGKILL the forwarder (the peer: its one process) `kills` times at
    `rate`, restarting it at once: readings doubled and lost per kill."""
    with ForwardRig(kind, "forward-kill") as rig:
        time.sleep(0.5)
        rig.sim.knob("SetNotifyRate", "d", rate)
        for _ in range(kills):
            time.sleep(spacing)
            victim = rig.fwd.proc if rig.fwd else rig.side.proc
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            if rig.fwd:
                rig.fwd.start()
            else:
                rig.side.restart()
        time.sleep(spacing)
        rig.sim.knob("SetNotifyRate", "d", 0)
        rig.wait_received(rig.sent(), 30)
        d = rig.delivery()
        return {**d, "rate": rate, "kills": kills, "duplicates_per_kill": d["duplicates"] / kills,
                "lost_per_kill": d["lost"] / kills}


def forward_backlog(batch, seconds=5, rate=20000):
    """Readings written while no forwarder ran (`rate` for `seconds`), then
    `tether forward` started: records per second until the broker has
    acknowledged all of them (the cursor at the log's last seq)."""
    with ForwardRig("tether", "forward-backlog", batch, start_forwarder=False) as rig:
        rig.sim.knob("SetNotifyRate", "d", rate)
        time.sleep(seconds)
        rig.sim.knob("SetNotifyRate", "d", 0)
        time.sleep(2)
        last = last_seq_on_disk(rig.side.readings)
        started = time.monotonic()
        rig.fwd = TetherForward(rig.work)
        done = wait_for(lambda: rig.fwd.cursor() >= last, 300, 0.01)
        elapsed = time.monotonic() - started
        cpu = proc_cpu(rig.fwd.pid)
        rig.wait_received(rig.sent(), 30)
        return {**rig.delivery(), "batch": batch, "records": last, "seconds": elapsed if done else None,
                "records_per_s": last / elapsed if done else None, "cpu_us_per_record": cpu * 1e6 / max(1, last)}


def bench_forward():
    seconds = duration("BENCH_FORWARD_DURATION", "20s")
    live = {}
    for rate, batch in ((2000, 1), (20000, 100)):
        for kind in SIDES:
            r = forward_live(kind, rate, batch, seconds)
            live[f"{kind}_{rate}"] = r
            print(f"  forward live {kind} {rate}/s batch {batch if kind == 'tether' else 1}: sent {r['sent']}, "
                  f"received {r['received']}, lost {r['lost']}, doubled {r['duplicates']}, "
                  f"last arrival {fmt(r['last_arrival_after_s'])} s after the stream stopped, "
                  f"{r['forwarding_cpu_us_per_reading']:.1f} µs CPU/reading forwarding", flush=True)
    outage = {k: forward_outage(k) for k in SIDES}
    kills = {k: forward_kills(k) for k in SIDES}
    backlog = {b: forward_backlog(b) for b in (1, 100)}
    for k in SIDES:
        print(f"  forward outage {k}: {outage[k]}", flush=True)
        print(f"  forward kills {k}: {kills[k]}", flush=True)
    for b, r in backlog.items():
        print(f"  forward backlog batch {b}: {r}", flush=True)
    rows = []
    for rate, batch in ((2000, 1), (20000, 100)):
        t, p = live[f"tether_{rate}"], live[f"peer_{rate}"]
        # Keeping up: never more than half a second's readings behind.
        keeps_up = t["lost"] == 0 and t["backlog_max"] is not None and t["backlog_max"] <= rate / 2
        rows += [(f"{rate}/s for {seconds:g}s (tether batch {batch}, peer one message each): lost / doubled",
                  f"{t['lost']} / {t['duplicates']}", f"{p['lost']} / {p['duplicates']}", "0 lost", t["lost"] == 0),
                 ("  backlog (on disk, not acknowledged) sampled every 0.5 s: median / max",
                  f"{fmt(t['backlog_median'])} / {fmt(t['backlog_max'])}", None, f"max ≤ {rate // 2} (keeps up)", keeps_up),
                 ("  last reading at the broker, s after the stream stopped", t["last_arrival_after_s"],
                  p["last_arrival_after_s"], "", None),
                 ("  forwarding CPU µs per reading (tether forward; the peer's one process)",
                  t["forwarding_cpu_us_per_reading"], p["forwarding_cpu_us_per_reading"], "", None),
                 ("  BLE + forwarding CPU µs per reading, all of the side's processes",
                  t["side_cpu_us_per_reading"], p["side_cpu_us_per_reading"], "", None),
                 ("  mosquitto's CPU µs per reading", t["broker_cpu_us_per_reading"], p["broker_cpu_us_per_reading"],
                  "", None)]
    t, p = outage["tether"], outage["peer"]
    rows += [("broker down 10 s at 1000/s: broker back → everything sent before it arrived, s",
              t["return_to_caught_up_s"], p["return_to_caught_up_s"], "", None),
             ("  of it, broker back → reconnected (the retry backoff: 1 s doubling, ±20 %, capped at 60 s), s",
              t["return_to_reconnected_s"], None, "", None),
             ("  lost / doubled over the run", f"{t['lost']} / {t['duplicates']}", f"{p['lost']} / {p['duplicates']}",
              "0 lost", t["lost"] == 0)]
    t, p = kills["tether"], kills["peer"]
    rows += [("SIGKILL ×5 at 1000/s (peer: its one process): doubled per kill", t["duplicates_per_kill"],
              p["duplicates_per_kill"], "≤ 64 (max_inflight)", t["duplicates_per_kill"] <= 64),
             ("  lost per kill", t["lost_per_kill"], p["lost_per_kill"], "0", t["lost"] == 0)]
    for b, r in backlog.items():
        rows.append((f"backlog of {r['records']} records on disk, batch {b}: records/s to all acknowledged",
                     r["records_per_s"], None, "", None))
        rows.append(("  CPU µs per record; lost / doubled", f"{r['cpu_us_per_record']:.1f}; {r['lost']} / {r['duplicates']}",
                     None, "0 lost", r["lost"] == 0))
    table("Forwarding to a local mosquitto (QoS 1, persistent subscriber; the peer publishes each reading from "
          "memory with paho-mqtt)", rows)
    return {"live": live, "outage": outage, "kills": kills, "backlog": {str(b): r for b, r in backlog.items()}}


def metrics_side(textfile, seconds):
    """tether run, online, keep-alive off and no notifications (so that the
    metrics writes are all it does), with or without a textfile written
    every second: CPU and wake-ups over `seconds`."""
    work = workdir("metrics")
    sim = Sim(work, "--notify-rate", "0", "--sleep-after", "1h")
    extra = f'[metrics]\ntextfile = "{work}/tether.prom"\ninterval = "1s"\n' if textfile else ""
    side = Side("tether", work, sim, reconnect=extra, keepalive=False)
    try:
        wait_subscribed(sim)
        time.sleep(2)
        sw0, cpu0 = switches(side.pid), thread_cpu(side.pid)
        time.sleep(seconds)
        sw1, cpu1 = switches(side.pid), thread_cpu(side.pid)
        size = os.path.getsize(f"{work}/tether.prom") if textfile else None
        return {"cpu_ms": cpu_between(cpu0, cpu1) * 1000, "wakeups_per_s": sum(n - sw0.get(t, 0) for t, n in sw1.items()) / seconds,
                "file_bytes": size}
    finally:
        side.stop()
        sim.close()
        shutil.rmtree(work, ignore_errors=True)


def bench_metrics():
    seconds = duration("BENCH_METRICS_DURATION", "30s")
    off, on = metrics_side(False, seconds), metrics_side(True, seconds)
    per_write_ms = (on["cpu_ms"] - off["cpu_ms"]) / seconds
    rows = [("textfile size, bytes", on["file_bytes"], None, "", None),
            ("CPU per write (refresh, format, write, fsync, rename), ms", per_write_ms, None, "", None),
            ("  CPU over %gs: textfile every 1 s / off, ms" % seconds, on["cpu_ms"], off["cpu_ms"], "", None),
            ("wake-ups/s: textfile every 1 s / off", on["wakeups_per_s"], off["wakeups_per_s"], "", None),
            ("CPU per minute at the default 15 s interval, ms", per_write_ms * 4, None, "", None)]
    table("Metrics textfile (tether run online, keep-alive off, no notifications; the peer has no metrics: "
          "its column is the same daemon with the textfile off)", rows)
    return {"textfile": on, "off": off, "cpu_ms_per_write": per_write_ms}


def fmt(v):
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def table(title, rows):
    header = ("", "tether", "peer (bleak)", "goal", "met")
    cells = [header] + [(r[0], fmt(r[1]), fmt(r[2]), r[3], "" if r[4] is None else fmt(r[4])) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    print(f"\n{title}")
    for n, c in enumerate(cells):
        print("  " + "  ".join(c[i].ljust(widths[i]) if i == 0 else c[i].rjust(widths[i]) for i in range(5)).rstrip())
        if n == 0:
            print("  " + "  ".join("-" * w for w in widths))
    sys.stdout.flush()


def bench_package():
    """The .deb as shipped (`make deb`'s, TETHER_DEB_DIR): its size, the size
    it installs, and the binary's. The peer has no package to compare."""
    deb_dir = os.environ.get("TETHER_DEB_DIR") or os.path.join(ROOT, ".build/deb")
    debs = sorted(glob.glob(os.path.join(deb_dir, "tether_*.deb")), key=os.path.getmtime)
    if not debs:
        print(f"\nPackage: no .deb in {deb_dir} (make deb builds one)")
        return {}
    deb = debs[-1]
    installed_kib = int(subprocess.run(["dpkg-deb", "-f", deb, "Installed-Size"], capture_output=True, text=True,
                                       check=True).stdout.strip())
    listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
    binary = max((int(line.split()[2]) for line in listing.splitlines() if line.endswith("/usr/bin/tether")), default=0)
    size_mb = os.path.getsize(deb) / 1e6
    rows = [(".deb, MB", size_mb, None, "≤ 5", size_mb <= 5),
            ("installed size, MiB", installed_kib / 1024, None, "≤ 15", installed_kib / 1024 <= 15),
            ("  of it /usr/bin/tether, MiB", binary / 1048576, None, "", None)]
    table(f"Package ({os.path.basename(deb)})", rows)
    return {"deb": os.path.basename(deb), "deb_mb": size_mb, "installed_mib": installed_kib / 1024,
            "binary_mib": binary / 1048576}


BENCHES = {"package": bench_package, "footprint": bench_footprint, "ingest": bench_ingest, "keepalive": bench_keepalive,
           "recovery": bench_recovery, "startup": bench_startup, "forward": bench_forward,
           "metrics": bench_metrics, "waiting": bench_waiting}


def main():
    names = sys.argv[1:] or list(BENCHES)
    for n in names:
        if n not in BENCHES:
            sys.exit(f"unknown benchmark {n!r}; known: {', '.join(BENCHES)}")
    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "results.json")
    try:
        results = json.load(open(path))
    except (OSError, ValueError):
        results = {}
    try:
        for n in names:
            started = time.time()
            figures = BENCHES[n]()
            figures["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
            results[n] = figures
            results["machine"] = {"cpus": os.cpu_count(), "uname": " ".join(os.uname()), "tether_bin": BIN}
            with open(path + ".tmp", "w") as f:
                json.dump(results, f, indent=2)
            os.replace(path + ".tmp", path)
    finally:
        stop_all()
    print(f"\nfigures: {path}")


if __name__ == "__main__":
    main()
