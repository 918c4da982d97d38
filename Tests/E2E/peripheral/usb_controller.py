#!/usr/bin/env python3
"""A real USB Bluetooth controller for the guest's kernel: a FunctionFS
gadget on dummy_hcd, bridged to Bumble's emulated controller on an air of
its own with the dongle (bumble_air.py's Air), so btusb binds it and
bluetoothd gets a USB hciN.

The gadget (configfs, /sys/kernel/config/usb_gadget/tether-bt) has one
FunctionFS function with one interface, class 0xE0/0x01/0x01, and the
device class 0xE0/0x01/0x01 too (btusb's generic entries match either):
an interrupt IN endpoint for HCI events, bulk IN and bulk OUT for ACL data,
no isochronous interface (btusb probes without one: SCO is not offered).
btusb sends HCI commands as class control requests to the device
(bRequestType 0x20, bRequest 0): FunctionFS hands those to ep0 only with
FUNCTIONFS_ALL_CTRL_RECIP (v2 descriptors). Each ENABLE (SET_CONFIGURATION:
enumeration, a USB reset, a re-attach) starts a fresh controller with the
current address; each DISABLE (a reset, an unbind) takes it off the air, and
its peer (the dongle) sees its link end with 0x08.

Faults, on the bridge's control socket (--usb-control; one command a line,
one JSON line back, as the dongle's):
  status                   the gadget's state, the address, the counters
  stop-answering [radio-off]
                           HCI commands get no answer, no event or ACL data
                           leaves, until the next USB reset or re-attach
                           (the kernel logs "hciN: command 0x.... tx timeout");
                           radio-off: the dongle's link ends too (0x08)
  new-address ADDR         the next enumeration (after a USB reset or a
                           re-attach) comes back with this public address
  drop-off-bus [SECONDS]   the gadget leaves the UDC (writes "" to its UDC
                           file): the kernel removes the USB device and hciN;
                           with SECONDS, it goes back on after that long
  attach                   the gadget goes back on the UDC (re-enumerated)
  stall-scan [until-reset] LE Advertising Reports are no longer passed to the
                           host while the scan stays enabled (BlueZ #1126,
                           #1554), until the host enables a scan again (LE Set
                           [Extended] Scan Enable); until-reset: until an
                           HCI_Reset (a power cycle, a reset) or the next
                           enumeration
  street on|off            the air's other advertisers (--others) start or
                           stop advertising
  quit
`--ignore-first-reset`: the HCI_Reset of the first enumeration's
initialisation gets no answer (the kernel logs "Opcode 0x0c03 failed: -110"
and never announces the controller); later ones are answered.

Prints `ready ADDRESS DONGLE_ADDRESS` once the gadget is on the bus, and
`enabled N ADDRESS`, `disabled`, `reset ignored`, ... as things happen. The
dongle's own control socket (--control) is dongle.py's. SIGTERM or SIGINT
(or `quit` on either socket) takes the gadget off the bus and exits.
"""

import argparse
import asyncio
import errno
import json
import logging
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
from bumble_air import Air  # noqa: E402
from controller_bridge import BridgeControl, ControllerBridge, plain, say  # noqa: E402
from selftest import FaithfulController  # noqa: E402
from bumble.hci import Address  # noqa: E402

CONFIGFS = Path("/sys/kernel/config")
GADGET = "tether-bt"
FUNCTION = "ffs.tetherbt"  # FunctionFS instance "tetherbt": mount -t functionfs tetherbt DIR
MODULES = ("dummy_hcd", "libcomposite", "usb_f_fs", "btusb")

# include/uapi/linux/usb/functionfs.h
FUNCTIONFS_DESCRIPTORS_MAGIC_V2 = 3
FUNCTIONFS_STRINGS_MAGIC = 2
FUNCTIONFS_HAS_FS_DESC = 1
FUNCTIONFS_HAS_HS_DESC = 2
FUNCTIONFS_ALL_CTRL_RECIP = 64
EVENT_NAMES = {0: "BIND", 1: "UNBIND", 2: "ENABLE", 3: "DISABLE", 4: "SETUP", 5: "SUSPEND", 6: "RESUME"}
EVENT_SIZE = 12  # struct usb_functionfs_event: usb_ctrlrequest (8), type, 3 pad

HCI_COMMAND, HCI_ACL, HCI_EVENT = 0x01, 0x02, 0x04
HCI_RESET = 0x0C03
# LE Set Scan Enable and LE Set Extended Scan Enable: the first parameter byte
# is Enable. LE Meta's Advertising Report and Extended Advertising Report.
SCAN_ENABLES = (0x200C, 0x2042)
HCI_LE_META, ADVERTISING_REPORTS = 0x3E, (0x02, 0x0D)


def interface(endpoints):
    # bLength, INTERFACE, bInterfaceNumber, bAlternateSetting, bNumEndpoints,
    # class 0xE0 (wireless), subclass 0x01 (RF), protocol 0x01 (Bluetooth), iInterface
    return struct.pack("<BBBBBBBBB", 9, 4, 0, 0, endpoints, 0xE0, 0x01, 0x01, 0)


def endpoint(address, attributes, max_packet, interval):
    return struct.pack("<BBBBHB", 7, 5, address, attributes, max_packet, interval)


# ep1: interrupt IN (events), ep2: bulk IN (ACL to the host), ep3: bulk OUT
# (ACL from the host); FunctionFS names the files by the descriptors' order.
# The interrupt endpoint takes 512 bytes at high speed (dummy_hcd's speed),
# so that every event (at most 257 bytes) is one short packet: with 16, as
# real dongles have, an event of exactly 16 bytes (Read Local Extended
# Features' Command Complete) never reached btusb over dummy_hcd and the
# kernel's initialisation timed out on it (make e2e, 6.1.0-56).
INT_IN, BULK_IN, BULK_OUT = 0x81, 0x82, 0x03
FULL_SPEED = [interface(3), endpoint(INT_IN, 0x03, 64, 1), endpoint(BULK_IN, 0x02, 64, 0),
              endpoint(BULK_OUT, 0x02, 64, 0)]
HIGH_SPEED = [interface(3), endpoint(INT_IN, 0x03, 512, 4), endpoint(BULK_IN, 0x02, 512, 0),
              endpoint(BULK_OUT, 0x02, 512, 0)]


def descriptors():
    body = struct.pack("<II", len(FULL_SPEED), len(HIGH_SPEED)) + b"".join(FULL_SPEED) + b"".join(HIGH_SPEED)
    flags = FUNCTIONFS_HAS_FS_DESC | FUNCTIONFS_HAS_HS_DESC | FUNCTIONFS_ALL_CTRL_RECIP
    return struct.pack("<III", FUNCTIONFS_DESCRIPTORS_MAGIC_V2, 12 + len(body), flags) + body


def strings():
    return struct.pack("<IIII", FUNCTIONFS_STRINGS_MAGIC, 16, 0, 0)  # no strings, no languages


class Gadget:
    """The configfs gadget and its FunctionFS mount; `udc` is the UDC it
    binds to (dummy_hcd's)."""

    def __init__(self, ffs_dir, vendor, product):
        self.root = CONFIGFS / "usb_gadget" / GADGET
        self.ffs_dir = Path(ffs_dir)
        self.vendor, self.product = vendor, product
        self.udc = None
        self.ep0 = None
        self.eps = {}

    @staticmethod
    def prepare():
        for module in MODULES:
            subprocess.run(["modprobe", module], check=True)
        if not (CONFIGFS / "usb_gadget").exists():
            subprocess.run(["mount", "-t", "configfs", "none", str(CONFIGFS)], check=True)

    def remove(self):
        """Takes away what an earlier run left (its process gone)."""
        if self.root.exists():
            try:
                (self.root / "UDC").write_text("\n")
            except OSError:
                pass
        subprocess.run(["umount", str(self.ffs_dir)], capture_output=True)
        if not self.root.exists():
            return
        config = self.root / "configs" / "c.1"
        for link in config.glob(FUNCTION):
            link.unlink()
        for path in [config / "strings" / "0x409", config, self.root / "functions" / FUNCTION,
                     self.root / "strings" / "0x409", self.root]:
            if path.exists():
                path.rmdir()

    def create(self):
        self.remove()
        root = self.root
        root.mkdir()
        for name, value in [("idVendor", self.vendor), ("idProduct", self.product), ("bcdUSB", 0x0200),
                            ("bcdDevice", 0x0100), ("bDeviceClass", 0xE0), ("bDeviceSubClass", 0x01),
                            ("bDeviceProtocol", 0x01)]:
            (root / name).write_text(f"0x{value:04x}\n")
        (root / "strings" / "0x409").mkdir()
        for name, value in [("manufacturer", "Tether e2e"), ("product", "Bumble over FunctionFS"),
                            ("serialnumber", "tether-e2e-1")]:
            (root / "strings" / "0x409" / name).write_text(value + "\n")
        config = root / "configs" / "c.1"
        config.mkdir()
        (config / "strings" / "0x409").mkdir()
        (config / "strings" / "0x409" / "configuration").write_text("bluetooth\n")
        (config / "MaxPower").write_text("100\n")
        (root / "functions" / FUNCTION).mkdir()
        (config / FUNCTION).symlink_to(root / "functions" / FUNCTION)
        self.ffs_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "functionfs", FUNCTION.split(".", 1)[1], str(self.ffs_dir)], check=True)
        self.ep0 = os.open(self.ffs_dir / "ep0", os.O_RDWR)
        os.write(self.ep0, descriptors())
        os.write(self.ep0, strings())
        # The endpoint files exist once the strings are in.
        # The IN endpoints (events, ACL to the host) are non-blocking: a
        # blocking write on a disabled endpoint waits for the next ENABLE and
        # then delivers what the last enumeration queued (a Command Complete
        # for a command the new one never sent). Non-blocking, it says EAGAIN
        # and the writer drops the packet once a DISABLE has passed.
        self.eps = {name: os.open(self.ffs_dir / name, os.O_RDWR | (os.O_NONBLOCK if name != "ep3" else 0))
                    for name in ("ep1", "ep2", "ep3")}
        udcs = sorted(os.listdir("/sys/class/udc"))
        if not udcs:
            raise RuntimeError("no UDC in /sys/class/udc (dummy_hcd not loaded?)")
        self.udc = udcs[0]

    def attach(self):
        (self.root / "UDC").write_text(self.udc + "\n")

    def detach(self):
        (self.root / "UDC").write_text("\n")

    def attached(self):
        try:
            return bool((self.root / "UDC").read_text().strip())
        except OSError:
            return False


class Bridge(ControllerBridge):
    """The Bumble controller behind the gadget. Threads block on the
    FunctionFS files (endpoint files have no poll); everything else runs on
    the asyncio loop."""

    def __init__(self, air, gadget, address, ignore_first_reset):
        self.air, self.gadget = air, gadget
        self.loop = asyncio.get_running_loop()
        self.address = address
        self.next_address = None
        self.ignore_resets = 1 if ignore_first_reset else 0
        self.controller = None
        self.generation = 0  # bumped at each ENABLE and DISABLE: what an older one queued is dropped
        self.answering = True
        self.enabled = False
        self.suspended = False
        self.counts = {"enables": 0, "disables": 0, "commands": 0, "ignored": 0, "events": 0, "acl_in": 0,
                       "acl_out": 0, "stalls": 0, "suspends": 0, "write_errors": 0, "dropped_stale": 0,
                       "reports_withheld": 0, "scan_enables": 0}
        # A stalled scan: None, "restart" (lifted by the host's next scan
        # enable) or "reset" (lifted by HCI_Reset or an enumeration).
        self.scan_stall = None
        self.events_out = queue.Queue()
        self.acl_out = queue.Queue()
        self.acl_buffer = b""
        self.enabled_event = asyncio.Event()
        self.trace = False  # a line per command and per event written

    def start_threads(self):
        for target, name in [(self.ep0_loop, "ep0"), (self.writer, "ep1"), (self.writer, "ep2"),
                             (self.bulk_reader, "ep3")]:
            threading.Thread(target=target, args=(name,), name=name, daemon=True).start()

    # ---------------------------------------------------------- threads
    def ep0_loop(self, _name):
        ep0 = self.gadget.ep0
        while True:
            try:
                raw = os.read(ep0, EVENT_SIZE)
            except OSError as error:
                if error.errno in (errno.EINTR, errno.EIDRM, errno.EAGAIN):
                    continue
                self.later(say, f"ep0 read failed: {error}")
                time.sleep(0.1)
                continue
            if len(raw) < EVENT_SIZE:
                continue
            request_type, request, value, index, length, kind = struct.unpack_from("<BBHHHB", raw)
            name = EVENT_NAMES.get(kind, str(kind))
            if name != "SETUP":
                self.later(self.on_event, name)
                continue
            if request_type & 0x80:  # IN: nothing here answers one; reading stalls it
                self.stall(ep0, read=True)
                continue
            try:
                data = os.read(ep0, length) if length else b""  # the data stage (and the status stage)
            except OSError as error:
                self.later(say, f"ep0 data stage failed: {error}")
                continue
            if request_type & 0x60 == 0x20 and request == 0:  # class request: an HCI command
                self.later(self.on_command, data)
            else:
                self.later(say, f"control request {request_type:#04x}/{request:#04x} value {value:#x} "
                                f"index {index} ignored")

    def stall(self, ep0, read):
        self.counts["stalls"] += 1
        try:
            os.read(ep0, 0) if read else os.write(ep0, b"")
        except OSError:
            pass  # EL2HLT: stalled

    def writer(self, name):
        fd = self.gadget.eps[name]
        source = self.events_out if name == "ep1" else self.acl_out
        while True:
            generation, packet = source.get()
            while generation == self.generation:  # else from before a reset, a detach
                try:
                    os.write(fd, packet)
                    if self.trace and name == "ep1":
                        self.later(say, f"event {packet[:1].hex()} ({len(packet)} bytes) written")
                    break
                except BlockingIOError:  # not enabled (yet, or any more: then DISABLE comes)
                    time.sleep(0.005)
                except OSError as error:  # ESHUTDOWN: disabled under it
                    self.counts["write_errors"] += 1
                    self.later(say, f"{name} write failed: {error}")
                    break
            else:
                self.counts["dropped_stale"] += 1

    def bulk_reader(self, name):
        fd = self.gadget.eps[name]
        while True:
            try:
                data = os.read(fd, 4096)
            except OSError as error:
                if error.errno not in (errno.ESHUTDOWN, errno.EINTR, errno.ECONNRESET):
                    self.later(say, f"{name} read failed: {error}")
                time.sleep(0.05)
                continue
            generation = self.generation
            self.later(self.on_acl_bytes, generation, data)

    def later(self, function, *args):
        self.loop.call_soon_threadsafe(function, *args)

    # ---------------------------------------------------------- the loop
    def on_event(self, name):
        if name == "ENABLE":
            self.enable()
        elif name == "DISABLE":
            self.disable()
        elif name == "SUSPEND":
            self.suspended = True
            self.counts["suspends"] += 1
        elif name == "RESUME":
            self.suspended = False
        elif name == "UNBIND":
            self.disable()
        say(f"event {name}")

    def enable(self):
        self.retire()
        if self.next_address is not None:
            self.address, self.next_address = self.next_address, None
        self.generation += 1
        self.counts["enables"] += 1
        self.answering = True
        self.lift_scan_stall("an enumeration")
        self.acl_buffer = b""
        generation = self.generation
        bridge = self

        class Sink:
            def on_packet(self, packet):
                bridge.from_controller(generation, packet)

        self.controller = FaithfulController("usb", host_sink=Sink(), link=self.air.link,
                                             public_address=self.address)
        self.enabled = True
        self.enabled_event.set()
        say(f"enabled {self.counts['enables']} {plain(self.address)}")

    def disable(self):
        if self.controller is not None:
            self.counts["disables"] += 1
            say("disabled")
        self.retire()
        self.enabled = False
        self.enabled_event.clear()

    def on_command(self, data):
        self.counts["commands"] += 1
        if len(data) < 3:
            say(f"a control request too short for an HCI command: {data.hex()}")
            return
        opcode = struct.unpack_from("<H", data)[0]
        if self.controller is None or not self.answering:
            self.counts["ignored"] += 1
            say(f"command {opcode:#06x} ignored" + ("" if self.controller else " (no controller)"))
            return
        if opcode == HCI_RESET and self.ignore_resets > 0:
            self.ignore_resets -= 1
            self.counts["ignored"] += 1
            say("reset ignored")
            return
        if self.trace:
            say(f"command {opcode:#06x} ({len(data)} bytes)")
        if opcode in SCAN_ENABLES and len(data) > 3 and data[3] == 1:
            self.counts["scan_enables"] += 1
            if self.scan_stall == "restart":
                self.lift_scan_stall("a scan enable")
        elif opcode == HCI_RESET and self.scan_stall == "reset":
            self.lift_scan_stall("HCI_Reset")
        try:
            self.controller.on_packet(bytes([HCI_COMMAND]) + data)
        except Exception as error:  # noqa: BLE001 - a bad command must not end the bridge
            say(f"command {data.hex()} failed in the controller: {type(error).__name__}: {error}")

    def on_acl_bytes(self, generation, data):
        if generation != self.generation or self.controller is None or not self.answering:
            return
        self.acl_buffer += data
        while len(self.acl_buffer) >= 4:
            length = struct.unpack_from("<H", self.acl_buffer, 2)[0]
            if len(self.acl_buffer) < 4 + length:
                break
            packet, self.acl_buffer = self.acl_buffer[:4 + length], self.acl_buffer[4 + length:]
            self.counts["acl_out"] += 1
            self.controller.on_packet(bytes([HCI_ACL]) + packet)

    def from_controller(self, generation, packet):
        if generation != self.generation or not self.answering:
            return
        if packet[0] == HCI_EVENT:
            if (self.scan_stall is not None and len(packet) > 3 and packet[1] == HCI_LE_META
                    and packet[3] in ADVERTISING_REPORTS):
                self.counts["reports_withheld"] += 1
                return
            self.counts["events"] += 1
            self.events_out.put((generation, packet[1:]))
        elif packet[0] == HCI_ACL:
            self.counts["acl_in"] += 1
            self.acl_out.put((generation, packet[1:]))

    # ---------------------------------------------------------- faults
    def status(self):
        return {"attached": self.gadget.attached(), "enabled": self.enabled, "suspended": self.suspended,
                "answering": self.answering, "address": plain(self.address), "next_address": plain(self.next_address),
                "ignore_resets": self.ignore_resets, "generation": self.generation,
                "scan_stall": self.scan_stall, **self.counts}

    def stall_scan(self, until):
        """The scan goes on in the controller, but no advertisement reaches
        the host: until the host's next scan enable ("restart") or until an
        HCI_Reset or enumeration ("reset")."""
        was, self.scan_stall = self.scan_stall, until
        self.counts["reports_withheld"] = 0
        say(f"scan stalled until {until}")
        return {"was_stalled": was, "until": until}

    def lift_scan_stall(self, why):
        if self.scan_stall is not None:
            say(f"scan stall lifted by {why} ({self.counts['reports_withheld']} reports withheld)")
            self.scan_stall = None

    def drop_off_bus(self, back_after=None):
        """Off the UDC; back on it after `back_after` seconds if given."""
        was = self.gadget.attached()
        if was:
            self.gadget.detach()
        say("detached")
        if back_after is not None:
            self.loop.call_later(back_after, self.attach)
        return {"was_attached": was, "back_after": back_after}

    def attach(self):
        was = self.gadget.attached()
        if not was:
            self.gadget.attach()
        say("attached")
        return {"was_attached": was}


class USBControl(BridgeControl):
    """The bridge's control socket: the bridges' commands and the gadget's."""

    HELP = ("status | stop-answering [radio-off] | new-address ADDR | drop-off-bus [SECONDS] | attach"
            " | stall-scan [until-reset] | street on|off | quit")

    def run_own(self, name, arguments):
        bridge = self.bridge
        if name == "drop-off-bus" and len(arguments) <= 1:
            back_after = float(arguments[0]) if arguments else None
            if back_after is not None and not 0 <= back_after < 3600:
                raise ValueError(f"drop-off-bus: seconds out of range: {arguments[0]}")
            return bridge.drop_off_bus(back_after)
        if name == "attach" and not arguments:
            return bridge.attach()
        if name == "stall-scan" and arguments in ([], ["until-reset"]):
            return bridge.stall_scan("reset" if arguments else "restart")
        return None


async def main(options):
    air = Air(options)
    Gadget.prepare()
    gadget = Gadget(options.ffs_dir, options.vendor, options.product)
    gadget.create()
    bridge = Bridge(air, gadget, Address(options.address, Address.PUBLIC_DEVICE_ADDRESS), options.ignore_first_reset)
    bridge.trace = options.trace
    quit_event = air.control.quit  # `quit` on either socket
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, quit_event.set)
    await air.start()
    control = USBControl(bridge, quit_event)
    server = await control.serve(options.usb_control)
    bridge.start_threads()
    gadget.attach()
    say(f"ready {options.address} {air.dongle.address}")
    try:
        await quit_event.wait()
    finally:
        server.close()
        if os.path.exists(options.usb_control):
            os.unlink(options.usb_control)
        try:
            gadget.detach()
        except OSError:
            pass
        bridge.disable()
        await air.close()
    # The threads sit in reads on FunctionFS files; the process's end
    # closes ep0, and the kernel lets go of the function.
    sys.stdout.flush()
    os._exit(0)


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="00:AA:01:04:00:01", help="the USB controller's public address")
    Air.add_arguments(parser, dongle_address="00:AA:01:04:00:02")
    parser.add_argument("--usb-control", required=True, help="the bridge's control socket")
    parser.add_argument("--ignore-first-reset", action="store_true",
                        help="leave the first enumeration's HCI_Reset unanswered")
    parser.add_argument("--trace", action="store_true", help="a line per HCI command and per event written")
    parser.add_argument("--ffs-dir", default="/run/tether-ffs", help="where FunctionFS is mounted")
    parser.add_argument("--vendor", type=lambda text: int(text, 0), default=0x1D6B,
                        help="idVendor (default 0x1d6b, the Linux Foundation's)")
    parser.add_argument("--product", type=lambda text: int(text, 0), default=0x0104,
                        help="idProduct (default 0x0104, a multifunction composite gadget)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main(arguments))
