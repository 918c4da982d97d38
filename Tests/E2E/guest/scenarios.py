#!/usr/bin/env python3
"""The e2e scenarios, run inside the QEMU guest against the real stack.

The guest's kernel has Bluetooth; `btvirt -l2` makes two emulated controllers
on one emulated air. bluetoothd (Debian's 5.66) gets hci0; the Bumble dongle
(Tests/E2E/peripheral/dongle.py) takes hci1 through an HCI user channel.
Tether runs as it would on a gateway, on the guest's system bus with the
shipped D-Bus policy, and the scenarios below inject faults and measure.

Writes to OUT (argv[1], a 9p share the host reads): one line per scenario on
stdout (the serial console) and in results.json, plus every process's log
and a btmon capture. Exit status 0 only if every scenario passed.
Parameters come from the kernel command line: e2e.tether=PATH (the binary),
e2e.python=PATH (the venv's python with bumble), both relative to the
project, and e2e.only=a,b (a subset).
"""

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from e2e_common import dongle_command, wait_until

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/e2e-out")
WORK = Path("/tmp/e2e")
CONTROL = WORK / "dongle.sock"
READINGS = WORK / "readings"
NUS_TX = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"

# The dongle's idle-sleep deadline and Tether's keep-alive: the poll comes
# four times per deadline, so a missed poll or two is still safe.
SLEEP_AFTER = 8
KEEPALIVE = 2
RATE = 10


def kernel_parameters():
    params = {}
    try:
        for arg in Path("/proc/cmdline").read_text().split():
            if arg.startswith("e2e.") and "=" in arg:
                key, value = arg[4:].split("=", 1)
                params[key] = value
    except OSError:
        pass
    return params


PARAMS = kernel_parameters()
TETHER = str(ROOT / PARAMS.get("tether", ".build/debug/tether"))
PYTHON = str(ROOT / PARAMS.get("python", ".build/e2e/venv/bin/python"))


def say(text):
    print(f"[{time.monotonic():9.3f}] {text}", flush=True)


class LogWatch:
    """A child's output, copied to a file and kept as (monotonic time, line)
    pairs so scenarios can wait for a line and measure when it came."""

    def __init__(self, stream, path):
        self.lines = []
        self.cond = threading.Condition()
        self.file = open(path, "a", buffering=1)
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream):
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            stamp = time.monotonic()
            self.file.write(f"{stamp:.3f} {line}\n")
            with self.cond:
                self.lines.append((stamp, line))
                self.cond.notify_all()

    def wait_for(self, pattern, timeout, since=0.0):
        """The first line after `since` matching `pattern`: (time, match), or None."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self.cond:
            while True:
                for stamp, line in self.lines[seen:]:
                    if stamp >= since:
                        match = regex.search(line)
                        if match:
                            return stamp, match
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def matching(self, pattern, since=0.0, until=float("inf")):
        regex = re.compile(pattern)
        with self.cond:
            return [(t, line) for t, line in self.lines if since <= t <= until and regex.search(line)]


class Guest:
    """The processes of the guest's Bluetooth stack, each logging to OUT."""

    def __init__(self):
        self.children = {}
        self.watches = {}

    def start(self, name, argv, watch=False, env=None):
        log = OUT / f"{name}.log"
        if watch:
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
            self.watches[name] = LogWatch(process.stdout, log)
        else:
            with open(log, "ab") as file:
                process = subprocess.Popen(argv, stdout=file, stderr=subprocess.STDOUT, env=env)
        self.children[name] = process
        return process

    def stop(self, name, sig=signal.SIGTERM, timeout=10):
        process = self.children.pop(name, None)
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        process.send_signal(sig)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def stop_all(self):
        for name in reversed(list(self.children)):
            self.stop(name)


def run(argv, timeout=30):
    """A short command; its output, or an exception naming it if it failed."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: {result.stdout}{result.stderr}".strip())
    return result.stdout


class Dongle:
    """The Bumble dongle's control socket: one JSON reply line per command."""

    def command(self, text):
        return dongle_command(CONTROL, text)

    def status(self):
        return self.command("status")


class Stack:
    """Brings the guest's stack up and holds what the scenarios share."""

    def __init__(self):
        self.guest = Guest()
        self.dongle = Dongle()
        self.address = None
        self.loss_windows = []  # (start, end, why): readings may be lost inside
        self.figures = {}
        # The current pass: `dongle.notify_path`, its readings directory, and
        # when it began (the dongle's sent log is shared by both passes).
        self.notify_path = "start-notify"
        self.readings = READINGS
        self.pass_started = 0.0

    @property
    def tether_log(self):
        return self.guest.watches["tether"]

    def up(self):
        started = time.monotonic()
        WORK.mkdir(parents=True, exist_ok=True)
        Path("/run/dbus").mkdir(parents=True, exist_ok=True)
        self.guest.start("dbus-daemon", ["dbus-daemon", f"--config-file={ROOT}/Tests/E2E/guest/system-bus.conf",
                                         "--nofork", "--nopidfile"])
        if not wait_until(lambda: Path("/run/dbus/system_bus_socket").exists(), 30):
            raise RuntimeError("the system bus did not come up")
        # Every message on the bus, to compare the real bluetoothd's ordering
        # with the simulator's when a scenario surprises us.
        self.guest.start("dbus-monitor", ["dbus-monitor", "--system"])
        run(["modprobe", "bluetooth"])
        # btmon writes the capture and prints it decoded (btmon.log).
        self.guest.start("btmon", ["btmon", "-w", str(OUT / "btmon.snoop")])
        run(["modprobe", "hci_vhci"])
        self.guest.start("btvirt", ["btvirt", "-l2"])
        if not wait_until(lambda: all(Path(f"/sys/class/bluetooth/hci{i}").exists() for i in (0, 1)), 30):
            raise RuntimeError("btvirt made no hci0 and hci1")
        # The kernel sets a new controller up (and holds it up briefly);
        # the user channel needs it down, or the bind fails with EBUSY.
        wait_until(lambda: subprocess.run(["hciconfig", "hci1", "down"], capture_output=True).returncode == 0, 20)
        self.start_dongle()
        self.start_bluetoothd()
        self.figures["stack_up_s"] = round(time.monotonic() - started, 1)
        say(f"stack up in {self.figures['stack_up_s']} s: bluetoothd on hci0, dongle {self.address} on hci1")

    def start_dongle(self):
        process = self.guest.start("dongle", [
            PYTHON, str(ROOT / "Tests/E2E/peripheral/dongle.py"), "--transport", "hci-socket:1",
            "--sleep-after", str(SLEEP_AFTER), "--rate", str(RATE), "--control", str(CONTROL),
            "--sent-log", str(OUT / "dongle-sent.jsonl"), "--event-log", str(OUT / "dongle-events.jsonl"),
        ], watch=True)
        ready = self.guest.watches["dongle"].wait_for(r"^ready (\S+)", 60)
        if ready is None:
            raise RuntimeError(f"the dongle did not start (exit {process.poll()}); see dongle.log")
        # Bumble prints the address with its type ("00:AA:01:01:00:01/P").
        self.address = ready[1].group(1).split("/")[0].upper()

    def start_bluetoothd(self):
        self.guest.start("bluetoothd", ["/usr/libexec/bluetooth/bluetoothd", "-n", "-d"])
        if not wait_until(lambda: "Powered: yes" in self.adapter_show(), 40, step=0.5):
            # AutoEnable is on by default in 5.66; power it on if it was not.
            subprocess.run(["bluetoothctl", "power", "on"], capture_output=True, timeout=30)
            if not wait_until(lambda: "Powered: yes" in self.adapter_show(), 20, step=0.5):
                raise RuntimeError("hci0 did not power on; see bluetoothd.log")

    def early_drop_windows(self):
        """With acquire-notify, bluetoothd drops what the dongle notifies
        between its CCCD write and the socket: from each "subscribed" in the
        dongle's log to Tether's line saying the socket arrived."""
        windows = []
        path = OUT / "dongle-events.jsonl"
        if self.notify_path == "start-notify" or not path.exists():
            return windows
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") != "subscribed" or event["t"] < self.pass_started:
                continue
            acquired = self.tether_log.matching(r"through an acquired socket", event["t"])
            windows.append((event["t"], acquired[0][0] if acquired else event["t"] + 2.0))
        return windows

    @staticmethod
    def adapter_show():
        try:
            return subprocess.run(["bluetoothctl", "show"], capture_output=True, text=True, timeout=15).stdout
        except subprocess.TimeoutExpired:
            return ""

    def start_tether(self):
        config = WORK / "tether.toml"
        config.write_text(f"""\
[bluez]
adapter = "hci0"

[dongle]
address = "{self.address}"
notify_path = "{self.notify_path}"

[keepalive]
interval = "{KEEPALIVE}s"
timeout = "2s"
sleep_after = "{SLEEP_AFTER}s"

[reconnect]
first_delay = "0s"
initial_backoff = "500ms"
max_backoff = "4s"
connect_timeout = "10s"
window = "20s"
window_attempts = 4
cooldown = "15s"
escalate = ["hci-reset"]

[readings]
directory = "{self.readings}"
flush_interval = "500ms"
""")
        started = time.monotonic()
        self.guest.start("tether", [TETHER, "run", "--config", str(config)], watch=True)
        return started

    def state_line(self, state, timeout, since):
        return self.tether_log.wait_for(rf"event=state-changed.* state={re.escape(state)}\b", timeout, since)

    def wait_reading_after(self, since, timeout):
        """When the first notification the dongle sent after `since` is on
        disk (found by polling the readings files), or None."""
        first_sent = wait_until(lambda: self.sent_after(since), timeout)
        if not first_sent:
            return None
        wanted = first_sent["seq"]
        found = wait_until(lambda: wanted in self.readings_seqs(), timeout, step=0.25)
        return time.monotonic() if found else None

    def sent(self):
        return [r for r in self.all_sent() if r["t"] >= self.pass_started]

    @staticmethod
    def all_sent():
        path = OUT / "dongle-sent.jsonl"
        if not path.exists():
            return []
        records = []
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                pass  # a line still being written
        return records

    def sent_after(self, since):
        return next((r for r in self.sent() if r["t"] >= since), None)

    def readings_seqs(self):
        """Sequence numbers of the NUS TX readings on disk, in file order."""
        seqs = []
        if not self.readings.exists():
            return seqs
        for path in sorted(self.readings.iterdir()):
            if not path.name.endswith(".jsonl"):
                continue
            for line in path.read_text(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                payload = bytes.fromhex(record.get("hex") or "")
                if record.get("char") == NUS_TX and len(payload) >= 4:
                    seqs.append(struct.unpack_from("<I", payload)[0])
        return seqs


def hci_resets(snoop, index=0):
    """The timestamps (the capture's own clock) of the HCI_Reset commands
    sent to controller `index` in a btmon capture."""
    resets = []
    try:
        data = snoop.read_bytes()
    except OSError:
        return resets
    offset = 16  # "btsnoop\0", version, datalink (2001 = monitor)
    while offset + 24 <= len(data):
        _, included, flags, _, stamp = struct.unpack_from(">IIIIq", data, offset)
        body = data[offset + 24: offset + 24 + included]
        offset += 24 + included
        # Monitor format: flags = index << 16 | opcode; opcode 2 = command.
        if flags >> 16 == index and flags & 0xFFFF == 2 and body[:2] == b"\x03\x0c":
            resets.append(stamp)
    return resets


# ---------------------------------------------------------------- scenarios
# Each takes the Stack and returns (passed, figures, detail).

def first_connect(stack):
    started = stack.start_tether()
    online = stack.state_line("online", 120, started)
    if online is None:
        return False, {}, "not online within 120 s of start"
    reading = stack.wait_reading_after(online[0], 30)
    figures = {"start_to_online_s": round(online[0] - started, 2)}
    if reading is None:
        return False, figures, "online, but no reading reached the disk within 30 s"
    figures["start_to_first_reading_s"] = round(reading - started, 2)
    return True, figures, ""


def keep_alive(stack):
    before = stack.dongle.status()
    hold = 4 * SLEEP_AFTER
    since = time.monotonic()
    time.sleep(hold)
    after = stack.dongle.status()
    drops = stack.tether_log.matching(r"event=disconnected", since)
    figures = {"held_s": hold, "sleep_after_s": SLEEP_AFTER, "dongle_sleeps": after["sleeps"] - before["sleeps"],
               "reconnections": after["connections"] - before["connections"],
               "notifications": after["seq"] - before["seq"]}
    ok = (after["state"] == "connected" and figures["dongle_sleeps"] == 0 and figures["reconnections"] == 0
          and not drops and figures["notifications"] >= RATE * hold * 0.8)
    return ok, figures, "" if ok else f"dongle {after['state']}, {len(drops)} disconnects in Tether's log"


# A notification the dongle sent this long before bluetoothd is killed or the
# adapter goes off may still be in the emulated controller or in bluetoothd,
# and dies with them (seen once: sent 8 ms before a SIGKILL, never on the
# bus). Under TCG a notification takes tens of milliseconds to reach Tether.
IN_FLIGHT = 0.5


def recovery(stack, fault, why, timeout=120, in_flight=0.0):
    """Injects `fault`, then measures Tether's way back: detected (left
    online), online again, and the first new reading on disk. Readings sent
    from `in_flight` seconds before the fault until online again may be lost."""
    injected = time.monotonic()
    fault()
    left = stack.tether_log.wait_for(r"event=state-changed.* state=(?!online)", 60, injected)
    if left is None:
        return False, {}, "Tether never noticed the fault"
    # Which sign came first: the notification socket's end or bluetoothd's signals.
    first_sign = "socket" if "notification socket" in left[1].string else "d-bus"
    online = stack.state_line("online", timeout, left[0])
    if online is None:
        return False, {"detected_ms": round((left[0] - injected) * 1000)}, f"not online within {timeout} s"
    reading = stack.wait_reading_after(online[0], 30)
    stack.loss_windows.append((injected - in_flight, online[0], why))
    figures = {"detected_ms": round((left[0] - injected) * 1000),
               "online_after_s": round(online[0] - injected, 2)}
    if stack.notify_path != "start-notify":
        figures["first_sign"] = first_sign
    if reading is None:
        return False, figures, "online, but readings did not resume"
    figures["reading_after_s"] = round(reading - injected, 2)
    return True, figures, ""


def link_drop(stack):
    return recovery(stack, lambda: stack.dongle.command("disconnect"), "link drop")


def fast_link_drop(stack):
    """A link drop while the dongle notifies at 100/s: with acquire-notify,
    bluetoothd drops what comes between its CCCD write and the socket; with
    start-notify, those notifications are signalled."""
    stack.dongle.command("rate 100")
    try:
        result = recovery(stack, lambda: stack.dongle.command("disconnect"), "link drop at 100/s")
        time.sleep(1)
    finally:
        stack.dongle.command(f"rate {RATE}")
    return result


def bluetoothd_kill(stack):
    def fault():
        stack.guest.stop("bluetoothd", signal.SIGKILL)
        time.sleep(1)
        stack.start_bluetoothd()
    return recovery(stack, fault, "bluetoothd SIGKILL", in_flight=IN_FLIGHT)


def adapter_power(stack):
    def fault():
        run(["bluetoothctl", "power", "off"])
        time.sleep(3)
        run(["bluetoothctl", "power", "on"])
    return recovery(stack, fault, "adapter power off/on", in_flight=IN_FLIGHT)


def escalation_hci_reset(stack):
    """The dongle refuses every connection until Tether's retry window is
    spent and it escalates: a real HCI_Reset on hci0 (libbluetooth ioctl).
    It refuses "silent" (advertising, not connectable): accepting and
    dropping at once made Debian's 6.1 kernel hit a BUG in hci_chan_del when
    bluetoothd released the half-made ATT socket, and bluetoothd died."""
    snoop = OUT / "btmon.snoop"
    resets_before = len(hci_resets(snoop))
    injected = time.monotonic()
    stack.dongle.command("refuse 300 silent")
    stack.dongle.command("disconnect")
    escalation = stack.tether_log.wait_for(r"escalating: hci-reset", 180, injected)
    if escalation is None:
        stack.dongle.command("refuse 0")
        return False, {}, "no hci-reset escalation within 180 s"
    finished = stack.tether_log.wait_for(r"event=state-changed.* state=(?!escalating)", 60, escalation[0])
    stack.dongle.command("refuse 0")
    released = time.monotonic()
    time.sleep(1)  # let btmon write the capture
    resets = len(hci_resets(snoop)) - resets_before
    online = stack.state_line("online", 180, released)
    figures = {"escalated_after_s": round(escalation[0] - injected, 1), "hci_resets_seen": resets,
               "attempts_before": len(stack.tether_log.matching(r"event=attempt-failed", injected, escalation[0]))}
    if online is None:
        return False, figures, "not online within 180 s of the dongle accepting again"
    stack.loss_windows.append((injected, online[0], "refused connections"))
    figures["online_after_release_s"] = round(online[0] - released, 1)
    ok = resets >= 1 and finished is not None
    return ok, figures, "" if ok else "no HCI_Reset command on hci0 in the btmon capture"


def reconnect_command(stack):
    started = time.monotonic()
    result = subprocess.run([TETHER, "reconnect", "--wait", "--timeout", "90s"], capture_output=True, text=True)
    elapsed = time.monotonic() - started
    (OUT / "reconnect-command.log").write_text(result.stdout + result.stderr)
    stack.loss_windows.append((started, time.monotonic(), "tether reconnect"))
    ok = result.returncode == 0 and "online" in result.stdout
    return ok, {"online_after_s": round(elapsed, 2)}, "" if ok else f"exit {result.returncode}: {result.stderr.strip()}"


def readings_match(stack):
    """Every notification the dongle sent is on disk once, in order; those
    missing must fall inside a fault's window (the link was down, or the
    fault killed what carried them: IN_FLIGHT)."""
    stack.dongle.command("rate 0")
    time.sleep(2)
    code = stack.guest.stop("tether")
    sent = stack.sent()
    on_disk = stack.readings_seqs()
    shutil.copytree(stack.readings, OUT / stack.readings.name, dirs_exist_ok=True)
    counted = set(on_disk)
    doubled = len(on_disk) - len(counted)
    out_of_order = sum(1 for a, b in zip(on_disk, on_disk[1:]) if b <= a)
    missing = [r for r in sent if r["seq"] not in counted]
    # The early-drop window (acquire-notify) first: it lies inside a fault's
    # window whenever the CCCD write follows a reconnect.
    early = stack.early_drop_windows()
    early_dropped = [r for r in missing if any(start <= r["t"] <= end for start, end in early)]
    excused = [r for r in missing if r not in early_dropped
               and any(start <= r["t"] <= end for start, end, _ in stack.loss_windows)]
    unexcused = [r["seq"] for r in missing if r not in excused and r not in early_dropped]
    # Readings of the other pass are not this pass's to count.
    extra = counted - {r["seq"] for r in stack.all_sent()}
    figures = {"notify_path": stack.notify_path, "sent": len(sent), "on_disk": len(on_disk),
               "missing_in_fault_windows": len(excused), "missing_early_drop": len(early_dropped),
               "missing_outside": len(unexcused), "doubled": doubled, "out_of_order": out_of_order,
               "unknown": len(extra), "tether_exit": code}
    for _, _, why in stack.loss_windows:
        figures[f"missing_in[{why}]"] = sum(
            1 for r in excused if any(s <= r["t"] <= e and w == why for s, e, w in stack.loss_windows))
    if stack.notify_path != "start-notify":
        figures["cccd_writes"] = len(early)
    ok = code == 0 and not unexcused and doubled == 0 and out_of_order == 0 and not extra and len(sent) > 0
    detail = "" if ok else f"missing outside fault windows: {unexcused[:10]}"
    return ok, figures, detail


def sleep_and_wake(stack):
    """The control experiment: with Tether stopped, the link stays up but
    idle, and the dongle really falls asleep; a restarted Tether cannot
    reach it until it is woken, then connects without a new scan."""
    if stack.dongle.status()["state"] != "connected":
        return False, {}, f"needs the dongle connected when Tether stops; it is {stack.dongle.status()['state']}"
    stopped = time.monotonic()
    asleep = wait_until(lambda: stack.dongle.status()["state"] == "asleep", SLEEP_AFTER * 3 + 20, step=0.5)
    if not asleep:
        return False, {}, f"the dongle did not fall asleep without Tether ({stack.dongle.status()['state']})"
    figures = {"asleep_after_s": round(time.monotonic() - stopped, 1)}
    started = stack.start_tether()
    early = stack.state_line("online", 15, started)
    if early is not None:
        return False, figures, "Tether reached a sleeping dongle"
    woken = time.monotonic()
    stack.dongle.command("wake")
    online = stack.state_line("online", 120, woken)
    if online is None:
        return False, figures, "not online within 120 s of the wake"
    figures["wake_to_online_s"] = round(online[0] - woken, 2)
    stack.guest.stop("tether")
    return True, figures, ""


def acquire_notify(stack):
    """The second pass: Tether again, with `notify_path = "acquire-notify"`,
    its own readings directory and fault windows, from the dongle's link as
    the first pass left it (connected, idle)."""
    stack.notify_path = "acquire-notify"
    stack.readings = WORK / "readings-acquire"
    stack.loss_windows = []
    stack.pass_started = time.monotonic()
    stack.dongle.command(f"rate {RATE}")
    passed, figures, detail = first_connect(stack)
    acquired = stack.tether_log.wait_for(r"through an acquired socket", 10, stack.pass_started)
    if passed and acquired is None:
        return False, figures, "online, but Tether did not say it acquired the socket"
    return passed, figures, detail


SCENARIOS = [
    ("first-connect", first_connect),
    ("keep-alive", keep_alive),
    ("link-drop", link_drop),
    ("fast-link-drop", fast_link_drop),
    ("bluetoothd-kill", bluetoothd_kill),
    ("adapter-power", adapter_power),
    ("escalation-hci-reset", escalation_hci_reset),
    ("reconnect-command", reconnect_command),
    ("readings-match", readings_match),
    ("acquire-notify", acquire_notify),
    ("acquire-keep-alive", keep_alive),
    ("acquire-link-drop", link_drop),
    ("acquire-fast-link-drop", fast_link_drop),
    ("acquire-bluetoothd-kill", bluetoothd_kill),
    ("acquire-readings-match", readings_match),
    ("sleep-and-wake", sleep_and_wake),
]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    booted = float(Path("/proc/uptime").read_text().split()[0])
    results = []
    stack = Stack()
    only = set(filter(None, PARAMS.get("only", "").split(",")))
    try:
        try:
            stack.up()
            results.append({"name": "stack-up", "passed": True, "seconds": stack.figures["stack_up_s"],
                            "figures": {"kernel_to_script_s": round(booted, 1), **stack.figures}, "detail": ""})
        except Exception as error:  # noqa: BLE001 - any failure here ends the run, reported
            results.append({"name": "stack-up", "passed": False, "seconds": 0, "figures": {}, "detail": str(error)})
        else:
            for name, scenario in SCENARIOS:
                if only and name not in only and name != "first-connect":
                    continue
                say(f"scenario {name}")
                started = time.monotonic()
                try:
                    passed, figures, detail = scenario(stack)
                except Exception as error:  # noqa: BLE001 - a broken scenario is a failed one
                    passed, figures, detail = False, {}, f"{type(error).__name__}: {error}"
                results.append({"name": name, "passed": passed, "seconds": round(time.monotonic() - started, 1),
                                "figures": figures, "detail": detail})
                say(f"{'PASS' if passed else 'FAIL'} {name} {json.dumps(figures)} {detail}")
                if name == "first-connect" and not passed:
                    break
    finally:
        stack.guest.stop_all()
        (OUT / "results.json").write_text(json.dumps({"guest_seconds": round(time.monotonic(), 1),
                                                      "results": results}, indent=1))
    return 0 if results and all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
