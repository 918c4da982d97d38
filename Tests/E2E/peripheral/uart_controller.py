#!/usr/bin/env python3
"""A UART Bluetooth controller for the guest's kernel: a pseudo-terminal
speaking H4, bridged to Bumble's emulated controller on an air of its own
with the dongle (bumble_air.py's Air), so that `btattach -B LINK -P h4`
attaches the kernel's hci_uart line discipline to its slave and bluetoothd
gets a UART hciN.

H4 is HCI over a byte stream: one byte of packet type (0x01 command, 0x02
ACL data, 0x04 event), then the packet. The bridge holds the pty's master
(raw, non-blocking) and never its slave: --link (a symlink to the slave,
/dev/pts/N, made atomically once the pty is ready) is what btattach opens.
An attachment is the time from the slave's opening (a read of the master
that no longer fails with EIO) to its last close (EIO again): each one
starts a fresh controller with the current address, each detachment takes
it off the air (its peer, the dongle, sees its link end with 0x08). A pty
slave keeps its line discipline while the master is open (the kernel
releases it only at the pair's last close), so that hci_uart would outlive
btattach and the next btattach's HCIUARTSETPROTO would fail with EBUSY: at
each detachment the bridge opens the slave, puts back N_TTY (hci_uart
closes: the kernel removes hciN, as after a real UART's last close),
flushes what either side left unread, and closes it. While detached it
looks for the next attachment every 100 ms.

Faults, on the bridge's control socket (--uart-control; one command a line,
one JSON line back, as the dongle's):
  status                   the line's state, the address, the counters
  stop-answering [radio-off]
                           HCI commands get no answer, no event or ACL data
                           leaves, until the line is attached again (a Pi's
                           UART lockup: the kernel logs "hciN: command
                           0x.... tx timeout"); radio-off: the dongle's link
                           ends too (0x08)
  new-address ADDR         the next attachment comes back with this public
                           address
  street on|off            the air's other advertisers (--others) start or
                           stop advertising
  quit
`--placeholder-address ADDR`: the first attachment's controller has this
address (Read BD_ADDR answers it; the dongle sees it): a Raspberry Pi's
controller comes up on its chip's default address until it is given its
own; every later attachment has --address.

Prints `ready ADDRESS DONGLE_ADDRESS SLAVE_PATH` once the pty and the link
exist, and `attached N ADDRESS`, `detached`, `command 0x.... ignored`, ...
as things happen. The dongle's own control socket (--control) is
dongle.py's. SIGTERM or SIGINT (or `quit` on either socket) removes the
link, closes the master (the slave hangs up) and exits.
"""

import argparse
import asyncio
import errno
import fcntl
import logging
import os
import signal
import struct
import sys
import termios
import threading
import tty

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
from bumble_air import Air  # noqa: E402
from selftest import FaithfulController  # noqa: E402
from controller_bridge import BridgeControl, ControllerBridge, plain, say  # noqa: E402
from bumble.hci import Address  # noqa: E402

HCI_COMMAND, HCI_ACL, HCI_EVENT = 0x01, 0x02, 0x04
# What follows the type byte from the host: (header length, where the
# length is in it, its format).
HEADERS = {HCI_COMMAND: (3, 2, "<B"), HCI_ACL: (4, 2, "<H")}
N_TTY = 0
POLL_SECONDS = 0.1  # while detached: how often the master is read for an attachment


class Pty:
    """The pseudo-terminal: its master (raw, non-blocking) and the link to
    its slave. The slave stays open only until the link exists."""

    def __init__(self, link):
        self.master, slave = os.openpty()
        self.slave_path = os.ttyname(slave)
        # On a master, termios requests act on the slave's settings: raw
        # until btattach sets its own.
        tty.setraw(self.master)
        os.set_blocking(self.master, False)
        self.link = link
        os.makedirs(os.path.dirname(os.path.abspath(link)), exist_ok=True)
        temporary = f"{link}.{os.getpid()}.tmp"
        if os.path.lexists(temporary):
            os.unlink(temporary)
        os.symlink(self.slave_path, temporary)
        os.replace(temporary, link)
        # From here reads of the master fail with EIO until someone opens
        # the slave through the link.
        os.close(slave)

    def read(self):
        """What the host wrote: bytes, b"" for nothing yet (attached), None
        for EIO (nobody has the slave open)."""
        try:
            return os.read(self.master, 65536)
        except BlockingIOError:
            return b""
        except OSError as error:
            if error.errno == errno.EIO:
                return None
            raise

    def release(self):
        """After the slave's last close: its line discipline back to N_TTY
        (the kernel keeps hci_uart on a pty slave while the master is open)
        and both directions flushed. Blocks for as long as hci_uart takes
        to unregister hciN: a thread's work. Returns the discipline found."""
        fd = os.open(self.slave_path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        try:
            found = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCGETD, bytes(4)))[0]
            if found != N_TTY:
                fcntl.ioctl(fd, termios.TIOCSETD, struct.pack("i", N_TTY))
            termios.tcflush(fd, termios.TCIOFLUSH)
            while self.read():  # whatever the host wrote last, or hci_uart on its way out
                pass
        finally:
            os.close(fd)
        return found

    def close(self):
        try:
            if os.path.islink(self.link) and os.readlink(self.link) == self.slave_path:
                os.unlink(self.link)
        finally:
            os.close(self.master)


class Bridge(ControllerBridge):
    """The Bumble controller behind the pty, on the asyncio loop; the
    master is watched while attached and read every POLL_SECONDS while
    detached (a master with no slave open polls as hung up: always
    readable)."""

    def __init__(self, air, pty, address, placeholder):
        self.air, self.pty = air, pty
        self.loop = asyncio.get_running_loop()
        self.address = address  # its own, from --address or new-address
        self.next_address = None
        self.placeholder = placeholder  # the first attachment's, or None
        self.current = None  # the attached controller's address
        self.controller = None
        self.generation = 0  # bumped at each attachment and detachment: what an older one sent is dropped
        self.answering = True
        self.attached = False
        self.counts = {"attachments": 0, "detachments": 0, "commands": 0, "ignored": 0, "events": 0,
                       "acl_in": 0, "acl_out": 0, "bytes_dropped": 0, "disciplines_released": 0}
        self.inbound = bytearray()  # from the host, not yet a whole packet
        self.outbound = bytearray()  # to the host, not yet taken by the pty
        self.watcher = None  # the detached line's task
        self.trace = False  # a line per command and per event written

    def start(self):
        self.watcher = asyncio.ensure_future(self.watch())

    def stop(self):
        if self.watcher is not None:
            self.watcher.cancel()
        self.detach(quiet=True, release=False)

    # ---------------------------------------------------------- the line
    async def watch(self, release=False):
        """Detached: the slave released if it was attached, then a read of
        the master every POLL_SECONDS until one does not fail with EIO."""
        if release:
            await self.release()
        while True:
            data = self.pty.read()
            if data is not None:
                self.watcher = None
                self.attach()
                if data:
                    self.on_bytes(data)
                return
            await asyncio.sleep(POLL_SECONDS)

    async def release(self):
        done = self.loop.create_future()

        def work():
            try:
                result = self.pty.release()
            except Exception as error:  # noqa: BLE001 - reported, the line carries on
                result = error
            self.loop.call_soon_threadsafe(lambda: done.done() or done.set_result(result))

        threading.Thread(target=work, name="release", daemon=True).start()
        found = await done
        if isinstance(found, Exception):
            say(f"releasing {self.pty.slave_path} failed: {type(found).__name__}: {found}")
        elif found != N_TTY:
            self.counts["disciplines_released"] += 1
            say(f"line discipline {found} released")

    def attach(self):
        self.retire()
        if self.next_address is not None:
            self.address, self.next_address = self.next_address, None
        self.generation += 1
        self.counts["attachments"] += 1
        self.answering = True
        self.inbound.clear()
        self.outbound.clear()
        first = self.counts["attachments"] == 1
        self.current = self.placeholder if first and self.placeholder is not None else self.address
        generation = self.generation
        bridge = self

        class Sink:
            def on_packet(self, packet):
                bridge.from_controller(generation, packet)

        self.controller = FaithfulController("uart", host_sink=Sink(), link=self.air.link,
                                             public_address=self.current)
        self.attached = True
        self.loop.add_reader(self.pty.master, self.on_readable)
        say(f"attached {self.counts['attachments']} {plain(self.current)}")

    def detach(self, quiet=False, release=True):
        """The slave's last close (EIO): the controller leaves the air and
        the line is watched for the next attachment."""
        if not self.attached:
            return
        self.loop.remove_reader(self.pty.master)
        self.loop.remove_writer(self.pty.master)
        self.attached = False
        self.counts["detachments"] += 1
        self.retire()
        self.inbound.clear()
        self.outbound.clear()
        if not quiet:
            say("detached")
        if release:
            self.watcher = asyncio.ensure_future(self.watch(release=True))

    def on_readable(self):
        data = self.pty.read()
        if data is None:
            self.detach()
        elif data:
            self.on_bytes(data)

    # ---------------------------------------------------------- host to controller
    def on_bytes(self, data):
        self.inbound += data
        while self.inbound and self.attached:
            kind = self.inbound[0]
            if kind not in HEADERS:
                # Out of step (or a type this bridge does not take): up to
                # the next byte that could start a command or ACL packet.
                skip = next((i for i, byte in enumerate(self.inbound) if byte in HEADERS), len(self.inbound))
                self.counts["bytes_dropped"] += skip
                say(f"unknown packet type {kind:#04x}: {skip} bytes dropped")
                del self.inbound[:skip]
                continue
            header, at, form = HEADERS[kind]
            if len(self.inbound) < 1 + header:
                return
            length = struct.unpack_from(form, self.inbound, 1 + at)[0]
            if len(self.inbound) < 1 + header + length:
                return
            packet = bytes(self.inbound[1:1 + header + length])
            del self.inbound[:1 + header + length]
            if kind == HCI_COMMAND:
                self.on_command(packet)
            else:
                self.on_acl(packet)

    def on_command(self, packet):
        self.counts["commands"] += 1
        opcode = struct.unpack_from("<H", packet)[0]
        if self.controller is None or not self.answering:
            self.counts["ignored"] += 1
            say(f"command {opcode:#06x} ignored" + ("" if self.controller else " (no controller)"))
            return
        if self.trace:
            say(f"command {opcode:#06x} ({len(packet)} bytes)")
        try:
            self.controller.on_packet(bytes([HCI_COMMAND]) + packet)
        except Exception as error:  # noqa: BLE001 - a bad command must not end the bridge
            say(f"command {packet.hex()} failed in the controller: {type(error).__name__}: {error}")

    def on_acl(self, packet):
        if self.controller is None or not self.answering:
            return
        self.counts["acl_out"] += 1
        self.controller.on_packet(bytes([HCI_ACL]) + packet)

    # ---------------------------------------------------------- controller to host
    def from_controller(self, generation, packet):
        if generation != self.generation or not self.answering or not self.attached:
            return
        if packet[0] == HCI_EVENT:
            self.counts["events"] += 1
            if self.trace:
                say(f"event {packet[1]:#04x} ({len(packet) - 1} bytes) written")
        elif packet[0] == HCI_ACL:
            self.counts["acl_in"] += 1
        self.outbound += packet  # H4: the type byte is the packet's first already
        self.flush()

    def flush(self):
        """As much as the pty takes; the rest when it is writable again."""
        while self.outbound:
            try:
                written = os.write(self.pty.master, self.outbound)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno == errno.EIO:
                    self.detach()
                    return
                raise
            del self.outbound[:written]
        if self.outbound:
            self.loop.add_writer(self.pty.master, self.flush)
        else:
            self.loop.remove_writer(self.pty.master)

    # ---------------------------------------------------------- faults
    # (stop-answering and new-address: ControllerBridge's)
    def status(self):
        return {"attached": self.attached, "answering": self.answering,
                "address": plain(self.current if self.attached else self.address),
                "own_address": plain(self.address), "next_address": plain(self.next_address),
                "placeholder": plain(self.placeholder), "slave": self.pty.slave_path, "link": self.pty.link,
                "generation": self.generation, **self.counts}


async def main(options):
    air = Air(options)
    address = Address(options.address, Address.PUBLIC_DEVICE_ADDRESS)
    placeholder = (Address(options.placeholder_address, Address.PUBLIC_DEVICE_ADDRESS)
                   if options.placeholder_address else None)
    quit_event = air.control.quit  # `quit` on either socket
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, quit_event.set)
    await air.start()
    pty = Pty(options.link)
    bridge = Bridge(air, pty, address, placeholder)
    bridge.trace = options.trace
    control = BridgeControl(bridge, quit_event)
    server = await control.serve(options.uart_control)
    bridge.start()
    say(f"ready {options.address} {air.dongle.address} {pty.slave_path}")
    try:
        await quit_event.wait()
    finally:
        server.close()
        if os.path.exists(options.uart_control):
            os.unlink(options.uart_control)
        bridge.stop()
        try:
            await air.close()
        finally:
            pty.close()  # the slave hangs up: hci_uart lets go of it
    # A release thread may still sit in the kernel (hci_uart unregistering).
    sys.stdout.flush()
    os._exit(0)


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="00:AA:01:06:00:01", help="the UART controller's public address")
    Air.add_arguments(parser, dongle_address="00:AA:01:06:00:02")
    parser.add_argument("--uart-control", required=True, help="the bridge's control socket")
    parser.add_argument("--link", default="/run/e2e/uart-pty",
                        help="a symlink to the pty's slave, for btattach (default /run/e2e/uart-pty)")
    parser.add_argument("--placeholder-address",
                        help="the first attachment's address (a chip's default, e.g. AA:AA:AA:AA:AA:AA)")
    parser.add_argument("--trace", action="store_true", help="a line per HCI command and per event written")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main(arguments))
