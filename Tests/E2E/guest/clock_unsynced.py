"""`clock-unsynced`: a gateway without a real-time clock, on the real stack.

The clock boot (`E2E_BOOTS=clock`, run.sh) starts the guest with QEMU's
`-rtc base=1970-01-01T00:00:00`, as a Raspberry Pi starts after a power cut
with no fake-hwclock, and runs this scenario after first-connect:

1. At 1970 (the kernel's NTP status unsynchronised since boot), Tether
   records readings and `tether forward` tries a TLS broker in the guest
   (mosquitto on 8883) whose certificate run.sh made on the host, valid from
   the host's today: the forwarder must say the clock is the cause
   (`broker-tls-clock`, naming 1970), never blame the CA file, and keep every
   record.
2. The clock is set to the real time (the host's time at launch plus the
   guest's CLOCK_BOOTTIME) and marked synchronised, as an NTP client does
   (clock_settime, then adjtimex clearing STA_UNSYNC): the forwarder must
   connect within seconds, not at the end of its backoff.
3. The clock is set back by 2 hours by hand (clock_settime: the kernel marks
   the clock unsynchronised again).

Then every reading the broker got is re-dated by the documented rule
(docs/operations.md, "Dating readings"), independently of Tether, and
checked against the true time of its arrival (the frame measured at the
step: wall clock minus CLOCK_BOOTTIME); `tether readings --redate` must
agree. Nothing may be lost or doubled; rotation (by size) and retention (by
total size) must be what they are without a jumping clock; `tether status`
ages ("connected for") must not jump with the clock; each step is logged
once (`event=clock-set`).

A subscriber on the broker's plain loopback listener (1883) receives what
the forwarder publishes over TLS (8883): at 1970 it could not verify the
broker either.
"""

import ctypes
import json
import subprocess
import time
from datetime import datetime, timezone

from e2e_common import broker_answers, start_subscriber, subscribed_readings, wait_until

# Phases' lengths: enough readings at 10/s (about 270 bytes each) to rotate
# several 8 KiB files while the forwarder cannot connect (and fewer than
# retention keeps: those are not forwarded yet), then enough to make
# retention delete some by size.
UNSYNCED_S = 20
SYNCED_S = 15
SET_BACK_S = 12
ROTATE_SIZE = 8 * 1024
RETAIN_SIZE = 96 * 1024
# A re-dated reading is right within this of its true time: the true frame is
# measured around the step (two clock reads, microseconds apart); the rest is
# the record's own ts/boot_ms pair, read together by Tether.
REDATE_TOLERANCE_S = 1.0
# The forwarder is to connect within seconds of the clock being set (issue
# 45); its backoff's next try after a TLS failure is up to 60 s away.
CONNECT_WITHIN_S = 10.0

ADJ_MAXERROR, ADJ_ESTERROR, ADJ_STATUS = 0x0004, 0x0008, 0x0010
TIME_ERROR = 5


class Timex(ctypes.Structure):
    """glibc's struct timex (x86-64), for adjtimex(2)."""
    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
                ("constant", ctypes.c_long), ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
                ("time_sec", ctypes.c_long), ("time_usec", ctypes.c_long), ("tick", ctypes.c_long),
                ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long), ("shift", ctypes.c_int),
                ("stabil", ctypes.c_long), ("jitcnt", ctypes.c_long), ("calcnt", ctypes.c_long),
                ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long), ("tai", ctypes.c_int),
                ("padding", ctypes.c_int * 11)]


LIBC = ctypes.CDLL("libc.so.6", use_errno=True)


def adjtimex(modes=0, status=0, maxerror=0, esterror=0):
    timex = Timex(modes=modes, status=status, maxerror=maxerror, esterror=esterror)
    state = LIBC.adjtimex(ctypes.byref(timex))
    if state < 0:
        raise OSError(ctypes.get_errno(), "adjtimex failed")
    return state


def kernel_says_synchronised():
    return adjtimex() != TIME_ERROR


def mark_synchronised():
    """What systemd-timesyncd, chrony and ntpd do once they have set the
    clock: clear the kernel's STA_UNSYNC, with a small error estimate."""
    adjtimex(ADJ_STATUS | ADJ_MAXERROR | ADJ_ESTERROR, status=0, maxerror=1000, esterror=100)


def frame():
    """The wall clock minus CLOCK_BOOTTIME now: constant between steps (but
    for a slew, which nothing here does)."""
    boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    wall = time.clock_gettime(time.CLOCK_REALTIME)
    return wall - boot


def step_to(wall):
    """clock_settime(CLOCK_REALTIME): what `date -s` does. The kernel marks
    the clock unsynchronised (TK_CLEAR_NTP). Returns (monotonic time of the
    step, the new frame)."""
    time.clock_settime(time.CLOCK_REALTIME, wall)
    return time.monotonic(), frame()


def ts_seconds(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def iso(seconds):
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def start_broker(env, stack, tls):
    """mosquitto with a TLS listener (the forwarder's) and a plain loopback
    one (the subscriber's), and a persistent QoS 1 subscriber."""
    subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True)
    config = env.WORK / "mosquitto-clock.conf"
    config.write_text(f"""\
per_listener_settings false
allow_anonymous true
persistence false
listener 1883 127.0.0.1
listener 8883 127.0.0.1
cafile {tls / 'ca.crt'}
certfile {tls / 'server.crt'}
keyfile {tls / 'server.key'}
""")
    stack.guest.start("mosquitto", ["mosquitto", "-c", str(config)])
    if not wait_until(broker_answers, 30, step=0.5):
        raise env.SetupFailure("mosquitto did not come up")
    start_subscriber(stack.guest, env.OUT / "clock-mqtt-received.txt", "e2e-clock")


def write_config(env, stack, readings, tls):
    config = env.WORK / "tether-clock.toml"
    config.write_text(f"""\
[bluez]
adapter = "{stack.adapter}"

[dongle]
address = "{stack.address}"
silence_limit = "{env.SILENCE_LIMIT}s"

[keepalive]
interval = "{env.KEEPALIVE}s"
timeout = "2s"
sleep_after = "{env.SLEEP_AFTER}s"

[reconnect]
first_delay = "0s"
initial_backoff = "500ms"
max_backoff = "4s"
connect_timeout = "10s"

[readings]
directory = "{readings}"
flush_interval = "500ms"
rotate_size = "{ROTATE_SIZE // 1024}KiB"
retain_size = "{RETAIN_SIZE // 1024}KiB"

[mqtt]
url = "mqtts://localhost:8883"
ca_file = "{tls / 'ca.crt'}"
batch = 1
""")
    return config


def received_records(env):
    """Each reading the subscriber wrote, parsed, in arrival order."""
    return [record for record, _ in subscribed_readings(env.OUT / "clock-mqtt-received.txt")]


def redate_by_the_rule(records):
    """docs/operations.md's rule, written here apart from Tether: per boot,
    the first synchronised record (by boot_ms) gives the boot's start,
    ts - boot_ms; each unsynchronised record is that plus its boot_ms.
    {(boot_id, seq): re-dated seconds} for the records the rule dates."""
    starts = {}
    for record in sorted(records, key=lambda r: r.get("boot_ms", 0)):
        boot = record.get("boot_id")
        if record.get("clock_synced") is True and boot not in starts:
            starts[boot] = ts_seconds(record["ts"]) - record["boot_ms"] / 1000
    return {(r["boot_id"], r["seq"]): starts[r["boot_id"]] + r["boot_ms"] / 1000
            for r in records if r.get("clock_synced") is False and r.get("boot_id") in starts}


def log_files(readings):
    return sorted((p.name, p.stat().st_size) for p in readings.glob("readings-*.jsonl"))


def connected_for(env):
    status = env.Stack.tether_status()
    return status.get("connected_for_seconds"), status.get("state")


def clock_unsynced(stack, env):
    figures, problems = {}, []
    tls = env.OUT / "tls"
    epoch = env.PARAMS.get("epoch")
    if not (tls / "ca.crt").exists() or not epoch:
        raise env.SetupFailure("no TLS files or e2e.epoch from run.sh: clock-unsynced runs in the clock boot "
                               "(E2E_BOOTS=clock)")
    year = datetime.now(timezone.utc).year
    figures["guest_year_at_start"] = year
    if year >= 2000:
        return False, figures, f"the guest's clock reads {year}: QEMU's -rtc base=1970 did not take"
    if kernel_says_synchronised():
        return False, figures, "the kernel says the clock is synchronised at 1970"

    # 1. At 1970: Tether and the forwarder.
    stack.guest.stop("tether")
    start_broker(env, stack, tls)
    readings = env.WORK / "clock-readings"
    config = write_config(env, stack, readings, tls)
    started = time.monotonic()
    stack.readings = readings
    stack.guest.start("tether", [env.TETHER, "run", "--config", str(config)], watch=True)
    online = stack.state_line("online", 120, started)
    if online is None:
        return False, figures, "Tether was not online at 1970 within 120 s"
    stack.guest.start("forward", [env.TETHER, "forward", "--config", str(config),
                                  "--state-directory", str(env.WORK / "clock-forward")], watch=True)
    forward = stack.guest.watches["forward"]
    refused = forward.wait_for(r"event=broker-tls-clock", 60, started)
    if refused is None:
        wrong = forward.matching(r"event=broker-tls-failed|event=broker-[a-z-]+", started)
        return False, figures, ("the forwarder never said the clock is why TLS fails: "
                                + (wrong[-1][1][-200:] if wrong else "no broker line at all"))
    figures["tls_clock_said_s"] = round(refused[0] - started, 2)
    if "1970" not in refused[1].string:
        problems.append(f"broker-tls-clock does not name the clock's reading: {refused[1].string[-200:]}")
    time.sleep(max(0.0, UNSYNCED_S - (time.monotonic() - online[0])))
    frame_a = frame()

    # 2. The clock set to the real time and marked synchronised.
    real = float(epoch) + time.clock_gettime(time.CLOCK_BOOTTIME)
    set_at, frame_b = step_to(real)
    mark_synchronised()
    if not kernel_says_synchronised():
        problems.append("adjtimex still says unsynchronised after clearing STA_UNSYNC")
    connected = forward.wait_for(r"event=broker-connected", 60, set_at)
    if connected is None:
        return False, figures, "the forwarder did not connect within 60 s of the clock being set"
    figures["connect_after_clock_set_s"] = round(connected[0] - set_at, 2)
    if connected[0] - set_at > CONNECT_WITHIN_S:
        problems.append(f"the forwarder connected {connected[0] - set_at:.1f} s after the clock was set "
                        f"(more than {CONNECT_WITHIN_S:.0f} s: it waited for its backoff)")
    time.sleep(2)
    aged_b, state_b = connected_for(env)
    since_online = time.monotonic() - online[0]
    time.sleep(max(0.0, SYNCED_S - (time.monotonic() - set_at)))

    # 3. Set back by 2 hours by hand.
    back_at, frame_c = step_to(time.clock_gettime(time.CLOCK_REALTIME) - 7200)
    time.sleep(2)
    aged_c, state_c = connected_for(env)
    since_online_c = time.monotonic() - online[0]
    time.sleep(SET_BACK_S)

    # The end: the dongle stops, the forwarder catches up, everything stops.
    stack.dongle.command("rate 0")
    time.sleep(2)
    stopped_at = time.monotonic()
    code = stack.guest.stop("tether")
    listing = subprocess.run([env.TETHER, "readings", "--directory", str(readings)], capture_output=True, text=True,
                             timeout=120)
    on_disk = [json.loads(line) for line in listing.stdout.splitlines() if line.startswith("{")]
    last_seq = max((r["seq"] for r in on_disk), default=0)
    delivered = wait_until(lambda: max((r["seq"] for r in received_records(env)), default=0) >= last_seq, 60, step=0.5)
    forward_code = stack.guest.stop("forward")
    stack.guest.stop("mosquitto_sub")
    stack.guest.stop("mosquitto")

    # Judge: what the broker got, against what the dongle sent.
    received = [r for r in received_records(env) if r.get("source") != "gap"]
    by_seq = {}
    for record in received:
        by_seq.setdefault(record["seq"], set()).add((record.get("hex"), record.get("ts")))
    readings_received = {r["seq"]: r for r in received}
    dongle_seqs = {}
    for record in readings_received.values():
        payload = bytes.fromhex(record.get("hex") or "")
        if record.get("char") == env.NUS_TX and len(payload) >= 4:
            dongle_seqs.setdefault(int.from_bytes(payload[:4], "little"), []).append(record["seq"])
    sent = [r for r in stack.sent() if online[0] + 1 <= r["t"] <= stopped_at - env.IN_FLIGHT]
    lost = [r["seq"] for r in sent if r["seq"] not in dongle_seqs]
    doubled = sorted(d for d, seqs in dongle_seqs.items() if len(seqs) > 1)
    reused = sorted(seq for seq, contents in by_seq.items() if len(contents) > 1)
    figures.update({"tether_exit": code, "forward_exit": forward_code, "sent": len(sent),
                    "received": len(readings_received), "resent": len(received) - len(readings_received),
                    "lost": len(lost), "doubled": len(doubled), "seq_reused": len(reused),
                    "delivered_all": bool(delivered)})
    if lost:
        problems.append(f"{len(lost)} readings the dongle sent never reached the broker: {lost[:8]}")
    if doubled:
        problems.append(f"dongle seqs logged twice: {doubled[:8]}")
    if reused:
        problems.append(f"seqs published with two readings: {reused[:8]}")
    if not delivered:
        problems.append(f"the broker never got the log's last seq {last_seq}")
    if code != 0:
        problems.append(f"tether run exited {code} on SIGTERM")

    # The records' own account of the clock, and the rule's repair.
    boots = {r.get("boot_id") for r in readings_received.values()}
    phases = {"unsynced_1970": 0, "synced": 0, "unsynced_set_back": 0}
    wrong_synced, wrong_redated, undatable, redated_right = [], [], [], 0
    redated = redate_by_the_rule(list(readings_received.values()))
    for record in readings_received.values():
        boot_ms = record.get("boot_ms")
        if not isinstance(boot_ms, int) or not isinstance(record.get("clock_synced"), bool):
            problems.append(f"seq {record['seq']} carries no boot_ms and clock_synced")
            break
        own_frame = ts_seconds(record["ts"]) - boot_ms / 1000
        nearest = min((abs(own_frame - f), name) for f, name in
                      ((frame_a, "unsynced_1970"), (frame_b, "synced"), (frame_c, "unsynced_set_back")))[1]
        true = frame_b + boot_ms / 1000
        if record["clock_synced"]:
            phases["synced"] += 1
            if abs(ts_seconds(record["ts"]) - true) > REDATE_TOLERANCE_S:
                wrong_synced.append((record["seq"], record["ts"], iso(true)))
            continue
        phases[nearest if nearest != "synced" else "unsynced_1970"] += 1
        when = redated.get((record["boot_id"], record["seq"]))
        if when is None:
            undatable.append(record["seq"])
        elif abs(when - true) > REDATE_TOLERANCE_S:
            wrong_redated.append((record["seq"], iso(when), iso(true)))
        else:
            redated_right += 1
    unsynced = phases["unsynced_1970"] + phases["unsynced_set_back"]
    figures.update({**phases, "redated_right": redated_right, "redated_wrong": len(wrong_redated),
                    "undatable": len(undatable), "synced_but_wrong": len(wrong_synced), "boot_ids": len(boots)})
    if phases["unsynced_1970"] < 50 or phases["synced"] < 50 or phases["unsynced_set_back"] < 50:
        problems.append(f"too few readings in a phase: {phases}")
    if redated_right != unsynced:
        problems.append(f"{unsynced - redated_right} of {unsynced} unsynchronised readings not re-dated right "
                        f"(wrong {wrong_redated[:3]}, undatable {undatable[:5]})")
    if wrong_synced:
        problems.append(f"{len(wrong_synced)} readings say the clock was synchronised with a ts off the true time "
                        f"by more than {REDATE_TOLERANCE_S} s: {wrong_synced[:3]}")
    if len(boots) != 1:
        problems.append(f"{len(boots)} boot ids in one boot")

    # tether readings --redate agrees with the rule on what is still on disk.
    listing = subprocess.run([env.TETHER, "readings", "--directory", str(readings), "--redate"],
                             capture_output=True, text=True, timeout=120)
    disagree = 0
    checked = 0
    for line in listing.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        when = redated.get((record.get("boot_id"), record.get("seq")))
        if when is None:
            continue
        checked += 1
        if "ts_redated" not in record or abs(ts_seconds(record["ts_redated"]) - when) > 0.002:
            disagree += 1
    figures.update({"redate_cli_checked": checked, "redate_cli_disagree": disagree})
    if listing.returncode != 0 or checked == 0 or disagree:
        problems.append(f"tether readings --redate: exit {listing.returncode}, {disagree} of {checked} records "
                        "re-dated otherwise than the rule")

    # Rotation by size, retention by total size, whatever the clock did.
    files = log_files(readings)
    longest = max((len(json.dumps(r, separators=(",", ":"))) + 1 for r in on_disk), default=0) + 64
    closed = files[:-1]
    oversize = [f for f in closed if f[1] > ROTATE_SIZE]
    undersize = [f for f in closed if f[1] < ROTATE_SIZE - longest]
    total = sum(size for _, size in files)
    seqs = [r["seq"] for r in on_disk]
    figures.update({"files": len(files), "first_seq_on_disk": min(seqs, default=0), "last_seq": last_seq,
                    "disk_bytes": total, "rotated_by_size": not oversize and not undersize})
    if oversize or undersize:
        problems.append(f"files not rotated by size ({ROTATE_SIZE} bytes): {oversize[:3]} {undersize[:3]}")
    if total > RETAIN_SIZE + ROTATE_SIZE:
        problems.append(f"{total} bytes kept, more than retain_size {RETAIN_SIZE} and one file")
    if not seqs or seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        problems.append("the log's seqs are not one run up to the last (retention must delete the oldest only)")
    if min(seqs, default=1) == 1:
        problems.append("retention deleted nothing: the scenario wrote too little to show it")

    # Status ages and the journal: nothing but ts moved with the clock.
    figures.update({"connected_for_after_set_s": aged_b, "connected_for_after_set_back_s": aged_c})
    for aged, state, since, when in ((aged_b, state_b, since_online, "set"), (aged_c, state_c, since_online_c, "set back")):
        if state != "online" or not isinstance(aged, (int, float)) or not 0 <= aged <= since + 5:
            problems.append(f"after the clock was {when}: state {state}, connected for {aged} s "
                            f"(online {since:.0f} s ago)")
    steps = stack.tether_log.matching(r"event=clock-set", started)
    figures["clock_set_lines"] = len(steps)
    if len(steps) != 2:
        problems.append(f"{len(steps)} event=clock-set lines for 2 steps of the clock")
    blamed = forward.matching(r"event=broker-tls-failed", started)
    if blamed:
        problems.append(f"the forwarder blamed the CA file or the certificate: {blamed[0][1][-160:]}")
    return not problems, figures, "; ".join(problems[:6])
