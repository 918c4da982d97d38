#!/usr/bin/env python3
"""The power-cut boot's guest side: one boot of many, each ended by the host
with SIGKILL to QEMU (Tests/E2E/vm/powercut.py), the last one cleanly.

Every boot mounts the virtio disk (/dev/vda, ext4 made on the host, mounted
with Debian's defaults: plain `mount -t ext4`) that holds Tether's readings
directory and the forwarder's state (its cursor). Before anything writes to it
the log is checked as the cut left it (`tether readings`, the tail, the
cursor); then the stack comes up (btvirt, the Bumble dongle, bluetoothd,
mosquitto and a persistent QoS 1 subscriber), `tether run` recovers the log
and `tether forward` goes on from its cursor, and the log is checked again.
A boot that is to be cut then prints `e2e-powercut: running boot N` on the
console and carries on until the host kills QEMU. The last boot, after its
checks, stops Tether, waits for the forwarder to deliver everything and sums
up every boot in results.json.

OUT (argv[1]) is the 9p share $E2E_OUT/power-cut: one folder per boot
(`boot-NN/`: the processes' logs, the dongle's sent log, what the subscriber
received, `check.json`), `cuts.jsonl` (the host's: one line per cut). 9p
writes go to the host synchronously (no cache on that share), so what the
dongle logged before the kill is on the host after it.

Kernel parameters: e2e.boot=N, e2e.final=1 on the last boot, e2e.tether,
e2e.python (as for the scenarios), e2e.seed (printed only).
"""

import json
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import scenarios
from scenarios import Stack, SetupFailure, say, NUS_TX, TETHER
from e2e_common import broker_answers, start_subscriber, subscribed_readings, wait_until

ROOT_OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/e2e-out")
PARAMS = scenarios.PARAMS
BOOT = int(PARAMS.get("boot", "0"))
FINAL = PARAMS.get("final") == "1"
DATA = Path("/run/data")  # the virtio disk's mount point
READINGS = DATA / "readings"
STATE = DATA / "forward"
CURSOR = STATE / "cursor"
BOOT_OUT = ROOT_OUT / f"boot-{BOOT:02d}"

# Tether's [readings] flush_interval: a reading is fsynced at most this long
# after its write(2).
FLUSH_INTERVAL = 0.5
# Beyond flush_interval, a reading the dongle logged as sent may still be on
# its way when the power goes (dongle -> btvirt -> kernel -> bluetoothd ->
# Tether, tens of milliseconds under TCG) or inside the fsync itself (the
# virtio flush under TCG). As IN_FLIGHT in the scenarios.
IN_FLIGHT = 0.5
# Faster than the scenarios' 10/s: more records at risk at each cut.
RATE = 20
# Small files, so that cuts fall before, during and after rotations.
ROTATE_SIZE = "16KiB"


def console(text):
    """A line the host's cut driver waits for (it reads the serial console)."""
    print(f"e2e-powercut: {text}", flush=True)


def sh(argv, timeout=60):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: {result.stdout}{result.stderr}".strip())
    return result.stdout


def mount_disk():
    sh(["modprobe", "virtio_blk"])
    sh(["modprobe", "ext4"])
    if not wait_until(lambda: Path("/dev/vda").exists(), 30):
        raise SetupFailure("no /dev/vda: the power-cut disk did not appear")
    DATA.mkdir(parents=True, exist_ok=True)
    # Debian's defaults: what fstab's "defaults" gives (rw, relatime,
    # data=ordered, delalloc, barriers on, journal replayed on mount).
    sh(["mount", "-t", "ext4", "/dev/vda", str(DATA)])
    return [line for line in Path("/proc/mounts").read_text().splitlines() if line.startswith("/dev/vda ")]


# ------------------------------------------------------------------ the log

def sent_by_boot(before):
    """{boot: [sent records]} for every earlier boot that sent anything."""
    found = {}
    for path in sorted(ROOT_OUT.glob("boot-*/dongle-sent.jsonl")):
        boot = int(path.parent.name.split("-")[1])
        if boot >= before:
            continue
        records = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                pass  # the line the cut interrupted
        if records:
            found[boot] = records
    return found


def read_log():
    """`tether readings` over the whole directory: (exit status, stderr,
    [(log seq, dongle seq or None, line)])."""
    result = subprocess.run([TETHER, "readings", "--directory", str(READINGS)],
                            capture_output=True, text=True, timeout=120)
    records = []
    for line in result.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            records.append((None, None, line))
            continue
        dongle_seq = None
        payload = bytes.fromhex(record.get("hex") or "")
        if record.get("char") == NUS_TX and len(payload) >= 4:
            dongle_seq = struct.unpack_from("<I", payload)[0]
        records.append((record.get("seq"), dongle_seq, line))
    return result.returncode, result.stderr.strip(), records


def boot_figures(lines):
    """What the records say of the boots they were taken in (version 2:
    boot_id, boot_ms, clock_synced): each boot its own id, its records in one
    run, boot_ms never going back within a boot."""
    figures = {"boot_ids": 0, "readings_without_boot": 0, "boot_id_came_back": 0, "boot_ms_went_back": 0,
               "clock_synced": 0, "clock_unsynced": 0}
    seen, current, last_ms = set(), None, None
    for line in lines:
        record = json.loads(line)
        if record.get("source") == "gap":
            continue
        boot, ms, synced = record.get("boot_id"), record.get("boot_ms"), record.get("clock_synced")
        if not isinstance(boot, str) or not isinstance(ms, int) or not isinstance(synced, bool):
            figures["readings_without_boot"] += 1
            continue
        figures["clock_synced" if synced else "clock_unsynced"] += 1
        if boot != current:
            if boot in seen:
                figures["boot_id_came_back"] += 1
            seen.add(boot)
            current, last_ms = boot, None
        if last_ms is not None and ms < last_ms:
            figures["boot_ms_went_back"] += 1
        last_ms = ms
    figures["boot_ids"] = len(seen)
    return figures


def tail_damage():
    """What a crash left at the ends of the files, as recovery sees it: per
    file, bytes after its last well-formed line, and lines in the middle that
    are not records (must be none)."""
    files, middle_bad = {}, 0
    for path in sorted(READINGS.glob("*.jsonl")) if READINGS.exists() else []:
        data = path.read_bytes()
        lines = data.split(b"\n")
        last_good = 0
        offset = 0
        bad_positions = []
        for index, line in enumerate(lines):
            end = offset + len(line) + (1 if index < len(lines) - 1 else 0)
            good = False
            if line:
                try:
                    good = isinstance(json.loads(line), dict) and "seq" in json.loads(line)
                except ValueError:
                    good = False
            if good:
                last_good = end
            elif line or index < len(lines) - 1:
                bad_positions.append(offset)
            offset = end
        middle_bad += sum(1 for position in bad_positions if position < last_good)
        torn = len(data) - last_good
        if torn:
            zeros = data[last_good:].count(0)
            files[path.name] = {"torn_bytes": torn, "nul_bytes": zeros,
                                "head": data[last_good:last_good + 60].decode(errors="replace")}
    return files, middle_bad


def cursor_value():
    try:
        return int(CURSOR.read_text().strip())
    except FileNotFoundError:
        return 0
    except ValueError:
        return -1  # torn: the cursor is replaced by rename, so never expected


def check_log(stage, sent):
    """The log against what earlier boots' dongles sent: every reading sent
    more than FLUSH_INTERVAL + IN_FLIGHT before its boot's last sent record
    (the cut came after that one) is there exactly once."""
    status, errors, records = read_log()
    log_seqs = [seq for seq, _, _ in records if seq is not None]
    dongle_seqs = [d for _, d, _ in records if d is not None]
    counts = {}
    for d in dongle_seqs:
        counts[d] = counts.get(d, 0) + 1
    doubled = sorted(d for d, n in counts.items() if n > 1)
    figures = {"readings_exit": status, "records": len(records),
               "not_records": sum(1 for seq, _, _ in records if seq is None),
               "last_seq": max(log_seqs, default=0),
               "log_seq_not_increasing": sum(1 for a, b in zip(log_seqs, log_seqs[1:]) if b <= a)}
    lost, lost_detail, required = [], [], 0
    present = set(dongle_seqs)
    for boot, records_sent in sent.items():
        last = records_sent[-1]["t"]
        for record in records_sent:
            if record["t"] <= last - FLUSH_INTERVAL - IN_FLIGHT:
                required += 1
                if record["seq"] not in present:
                    lost.append(record["seq"])
                    lost_detail.append(f"boot {boot} seq {record['seq']} sent {last - record['t']:.2f}s before the cut")
    figures.update({"required": required, "lost": len(lost), "doubled": len(doubled)})
    figures.update(boot_figures([line for seq, _, line in records if seq is not None]))
    problems = []
    if status != 0:
        problems.append(f"tether readings exited {status}: {errors[:200]}")
    if figures["not_records"]:
        problems.append(f"{figures['not_records']} lines of tether readings are not JSON records")
    if figures["log_seq_not_increasing"]:
        problems.append("log seqs not increasing")
    if lost:
        problems.append(f"lost {len(lost)} readings older than flush_interval: {lost_detail[:5]}")
    if doubled:
        problems.append(f"doubled dongle seqs {doubled[:10]}")
    if figures["readings_without_boot"]:
        problems.append(f"{figures['readings_without_boot']} readings carry no boot_id, boot_ms and clock_synced")
    if figures["boot_id_came_back"]:
        problems.append("a boot_id came back after another boot's records: each boot must have its own")
    if figures["boot_ms_went_back"]:
        problems.append(f"boot_ms went back {figures['boot_ms_went_back']} times within one boot")
    figures["lost_seqs"] = lost
    return figures, problems, records


# ------------------------------------------------------------- the stack

def start_mqtt(stack):
    sh(["ip", "link", "set", "lo", "up"])
    config = scenarios.WORK / "mosquitto.conf"
    config.write_text("listener 1883 127.0.0.1\nallow_anonymous true\npersistence false\n")
    stack.guest.start("mosquitto", ["mosquitto", "-c", str(config)])
    if not wait_until(broker_answers, 30, step=0.5):
        raise SetupFailure("mosquitto did not come up")
    start_subscriber(stack.guest, BOOT_OUT / "mqtt-received.txt", "e2e-powercut")


def write_config(address):
    config = scenarios.WORK / "tether.toml"
    config.write_text(f"""\
[bluez]
adapter = "hci0"

[dongle]
address = "{address}"
silence_limit = "{scenarios.SILENCE_LIMIT}s"

[keepalive]
interval = "{scenarios.KEEPALIVE}s"
timeout = "2s"
sleep_after = "{scenarios.SLEEP_AFTER}s"

[reconnect]
first_delay = "0s"
initial_backoff = "500ms"
max_backoff = "4s"
connect_timeout = "10s"

[readings]
directory = "{READINGS}"
flush_interval = "{int(FLUSH_INTERVAL * 1000)}ms"
rotate_size = "{ROTATE_SIZE}"
retain_size = "64MiB"

[mqtt]
url = "mqtt://127.0.0.1"
batch = 1
""")
    return config


def received_records(boot_dir):
    """(log seq, line) of each reading the subscriber wrote, in order."""
    return [(record["seq"], text) for record, text in subscribed_readings(boot_dir / "mqtt-received.txt") if "seq" in record]


# ------------------------------------------------------------- one boot

def run_boot(stack, check):
    stack.readings = READINGS
    sent = sent_by_boot(BOOT)
    check["mounts"] = mount_disk()
    first_seq = 1 + max((r["seq"] for records in sent.values() for r in records), default=0)
    if sent:
        first_seq += 1000  # a notification whose sent line the cut took
    check["first_seq"] = first_seq

    # 1. The log as the cut left it, before anything writes to it.
    if BOOT > 0:
        figures, problems, _ = check_log("before", sent)
        torn, middle_bad = tail_damage()
        cursor = cursor_value()
        figures.update({"cursor": cursor, "torn_files": torn, "bad_lines_mid_file": middle_bad})
        if cursor < 0:
            problems.append("the cursor file is torn")
        if cursor > figures["last_seq"]:
            problems.append(f"the forwarder's cursor {cursor} is past the last seq on disk {figures['last_seq']}: "
                            f"Tether will hand seqs {figures['last_seq'] + 1}…{cursor} out again and the forwarder "
                            "will skip them")
        if middle_bad:
            problems.append(f"{middle_bad} damaged lines before a file's last record")
        check["before"] = {"figures": figures, "problems": problems}
        say(f"before recovery: {json.dumps(figures)} {problems}")

    # 2. The stack; tether run recovers the log, tether forward resumes.
    scenarios.RATE = RATE
    stack.start_dongle = lambda: Stack.start_dongle(stack, first_seq)
    stack.up()
    check["setup_tries"] = stack.setup_tries
    check["setup_faults"] = stack.setup_faults
    start_mqtt(stack)
    config = write_config(stack.address)
    started = time.monotonic()
    stack.guest.start("tether", [TETHER, "run", "--config", str(config)], watch=True)
    recovered = stack.tether_log.wait_for(r"readings log: (.*)", 60, started)
    if recovered is None:
        raise RuntimeError("tether run said nothing about its readings log")
    line = recovered[1].group(1)
    torn = re.search(r"truncated (\d+) torn bytes from (\S+);", line)
    continuing = re.search(r"continuing after seq (\d+)", line)
    check["recovery"] = {"line": line, "torn_bytes": int(torn.group(1)) if torn else 0,
                         "file": torn.group(2) if torn else None,
                         "continuing_after": int(continuing.group(1)) if continuing else 0}
    stack.guest.start("forward", [TETHER, "forward", "--config", str(config), "--state-directory", str(STATE)],
                      watch=True)
    forwarding = stack.guest.watches["forward"].wait_for(r"forwarding after seq (\d+)", 60, started)
    # Debian's 6.1 guest kernel can oops in hci_chan_del when a connect fails
    # at once, killing bluetoothd (seen once in boot 1 of a clean-clone run,
    # Tether rightly waiting-for-bluez): started again, as the package's
    # bluetooth.service drop-in (Restart=on-failure) does on a gateway.
    deaths = []
    online = scenarios.wait_tether(stack, r"event=state-changed.* state=online\b", 120, started, deaths)
    if deaths:
        check["bluetoothd_deaths"] = deaths
    if online is None:
        raise RuntimeError(f"Tether was not online within 120 s (bluetoothd deaths: {deaths})")
    if forwarding is None:
        raise RuntimeError("tether forward did not connect to mosquitto within 60 s")
    check["forward_from"] = int(forwarding[1].group(1))
    check["online_s"] = round(online[0] - started, 2)
    if not stack.wait_reading_after(online[0], 30):
        raise RuntimeError("online, but no reading on disk within 30 s")

    # 3. The log again, after Tether's own recovery (Tether is writing).
    figures, problems, _ = check_log("after", sent)
    recovery = check["recovery"]
    before = check.get("before", {}).get("figures", {})
    if BOOT > 0 and recovery["continuing_after"] < before.get("last_seq", 0):
        problems.append(f"Tether continues after seq {recovery['continuing_after']}, below the log's "
                        f"{before['last_seq']}")
    if check["forward_from"] > recovery["continuing_after"]:
        problems.append(f"the forwarder goes on after seq {check['forward_from']}, past the log's last "
                        f"{recovery['continuing_after']}: it skips what Tether writes next under those seqs")
    check["after"] = {"figures": figures, "problems": problems}
    say(f"after recovery: {json.dumps(figures)} {problems}")
    return stack


def final_summary(stack, check):
    """The last boot: stop cleanly, let the forwarder deliver everything,
    and sum up every boot."""
    time.sleep(5)
    stack.dongle.command("rate 0")
    time.sleep(2)
    code = stack.guest.stop("tether")
    _, _, records = read_log()
    last = max((seq for seq, _, _ in records if seq is not None), default=0)
    caught_up = wait_until(lambda: cursor_value() == last, 60, step=0.5)
    time.sleep(1)
    forward_code = stack.guest.stop("forward")
    stack.guest.stop("mosquitto_sub")

    # Every boot's checks.
    boots = []
    for path in sorted(ROOT_OUT.glob("boot-*/check.json")):
        try:
            boots.append(json.loads(path.read_text()))
        except ValueError:
            pass
    cuts = []
    try:
        cuts = [json.loads(line) for line in (ROOT_OUT / "cuts.jsonl").read_text().splitlines() if line.strip()]
    except OSError:
        pass
    ran = [b for b in boots if "after" in b]

    # This boot's orderly stop: everything the dongle sent is on disk.
    sent_now = [r["seq"] for r in (sent_by_boot(BOOT + 1).get(BOOT) or [])]
    on_disk = {d for _, d, _ in records if d is not None}
    missing_at_stop = [s for s in sent_now if s not in on_disk]

    # Never skips: every record on disk (seq and content) reached the
    # subscriber in some boot, but for those the broker acknowledged and
    # whose subscriber died with the guest before writing them: after that
    # boot's last received seq, up to the cursor the next boot went on from.
    received = {}
    all_received = 0
    excused = set()
    by_boot = {b["boot"]: b for b in ran}
    order = sorted(by_boot)
    for index, boot in enumerate(order):
        got = received_records(ROOT_OUT / f"boot-{boot:02d}")
        all_received += len(got)
        for seq, line in got:
            received.setdefault(seq, set()).add(_content(line))
        if index + 1 < len(order):
            nxt = by_boot[order[index + 1]]
            top = max((seq for seq, _ in got), default=by_boot[boot].get("forward_from", 0))
            excused.update(range(top + 1, nxt.get("forward_from", 0) + 1))
    not_delivered, wrong_content = [], []
    for seq, _, line in records:
        if seq is None or seq in excused:
            continue
        if seq not in received:
            not_delivered.append(seq)
        elif _content(line) not in received[seq]:
            wrong_content.append(seq)
    resent = all_received - len({(seq, c) for seq, contents in received.items() for c in contents})

    problems = []
    for b in ran:
        for stage in ("before", "after"):
            for problem in b.get(stage, {}).get("problems", []):
                problems.append(f"boot {b['boot']} {stage}: {problem}")
    lost = len({seq for b in ran for stage in ("before", "after")
                for seq in b.get(stage, {}).get("figures", {}).get("lost_seqs", [])})
    doubled = max((b["after"]["figures"]["doubled"] for b in ran), default=0)
    if code != 0:
        problems.append(f"tether run exited {code} on SIGTERM")
    if missing_at_stop:
        problems.append(f"{len(missing_at_stop)} readings of the last boot missing after a clean stop")
    if not caught_up:
        problems.append(f"the forwarder's cursor {cursor_value()} never reached the log's last seq {last}")
    if not_delivered:
        problems.append(f"{len(not_delivered)} records on disk never reached the subscriber: {not_delivered[:10]}")
    if wrong_content:
        problems.append(f"{len(wrong_content)} seqs reached the subscriber only with other content: {wrong_content[:10]}")
    reused = sorted(seq for seq, contents in received.items() if len(contents) > 1)
    if reused:
        problems.append(f"{len(reused)} seqs reached the subscriber with two readings: {reused[:10]}")
    if len(cuts) < 10:
        problems.append(f"only {len(cuts)} cuts")
    figures = {
        "cuts": len(cuts), "boots": len(ran), "lost": lost, "doubled": doubled,
        "torn_repaired": sum(1 for b in ran if b.get("recovery", {}).get("torn_bytes", 0) > 0),
        "torn_bytes": sum(b.get("recovery", {}).get("torn_bytes", 0) for b in ran),
        "resent": resent,
        # Seqs the subscriber got with two readings: one published before a
        # cut took it from the disk, the other written under the same seq
        # after. Must be 0: the forwarder publishes only what is durable.
        "seq_reused": len(reused),
        "cursor_ahead": sum(1 for b in ran if b.get("before", {}).get("figures", {}).get("cursor", 0)
                            > b.get("before", {}).get("figures", {}).get("last_seq", 0)),
        "required": sum(b.get("before", {}).get("figures", {}).get("required", 0) for b in ran),
        "records": len(records), "delivered": len(records) - len(not_delivered) - len(excused & {s for s, _, _ in records}),
        "acked_not_seen": len(excused & {s for s, _, _ in records}),
        "setup_tries": sum(b.get("setup_tries", 0) for b in boots),
        "cut_after_s": ",".join(f"{c['delay_s']:.1f}" for c in cuts),
        "tether_exit": code, "forward_exit": forward_code,
    }
    return figures, problems


def _content(line):
    """A record's identity beyond its seq: the dongle's payload and time."""
    try:
        record = json.loads(line)
    except ValueError:
        return line
    return (record.get("hex"), record.get("ts"))


def main():
    BOOT_OUT.mkdir(parents=True, exist_ok=True)
    scenarios.OUT = BOOT_OUT
    console(f"boot {BOOT} starting (seed {PARAMS.get('seed', '?')})")
    check = {"boot": BOOT, "final": FINAL}
    stack = Stack()
    results = []
    status = 0
    try:
        run_boot(stack, check)
    except SetupFailure as error:
        check["setup_failure"] = str(error)
        console(f"setup-failure boot {BOOT}: {error}")
        results.append({"name": "stack-up", "passed": False, "seconds": 0, "setup_failure": True,
                        "figures": {"boot": BOOT}, "detail": f"set-up failure, not Tether's: {error}"})
        status = 3
    except Exception as error:  # noqa: BLE001 - reported, and the boot ends
        check["error"] = f"{type(error).__name__}: {error}"
        console(f"error boot {BOOT}: {check['error']}")
        results.append({"name": "power-cut", "passed": False, "seconds": round(time.monotonic(), 1),
                        "figures": {"boot": BOOT}, "detail": check["error"]})
        status = 1
    (BOOT_OUT / "check.json").write_text(json.dumps(check, indent=1))
    if status == 0 and not FINAL:
        console(f"running boot {BOOT}")
        while True:  # until the host pulls the plug
            time.sleep(60)
    if status == 0:
        started = time.monotonic()
        try:
            figures, problems = final_summary(stack, check)
        except Exception as error:  # noqa: BLE001
            figures, problems = {}, [f"{type(error).__name__}: {error}"]
        results.append({"name": "power-cut", "passed": not problems, "seconds": round(time.monotonic() - started, 1),
                        "figures": figures, "detail": "; ".join(problems[:6])})
        console(f"{'PASS' if not problems else 'FAIL'} power-cut {json.dumps(figures)} {problems[:6]}")
    stack.guest.stop_all()
    subprocess.run(["umount", str(DATA)], capture_output=True)
    (ROOT_OUT / "results.json").write_text(json.dumps({
        "guest_seconds": round(time.monotonic(), 1),
        "setup": {"tries": check.get("setup_tries", 0), "faults": check.get("setup_faults", [])},
        "results": results}, indent=1))
    console(f"done boot {BOOT} status {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
