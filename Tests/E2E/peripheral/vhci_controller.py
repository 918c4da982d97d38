#!/usr/bin/env python3
"""One more Bluetooth controller for the guest's kernel: Bumble's emulated
controller behind /dev/vhci, for the e2e harness's controller faults.

The kernel sees a new hciN (bus Virtual) and initialises it as any other;
bluetoothd gets it once that worked. Its air is its own (a Bumble LocalLink
with nothing else on it): it reaches no dongle. What it is for:

- `--ignore-reset N`: the first N HCI_Reset commands get no answer, as a
  controller that does not come up. The kernel's initialisation gives up
  after 10 s ("hciN: Opcode 0x0c03 failed: -110"), leaves hciN down with
  no address, and never announces the index to bluetoothd. SIGUSR1 makes it
  answer every Reset from then on (`hciconfig hciN up` then initialises it).
- filling an index: started while another controller is gone, it takes the
  lowest free hciN, and the controller that comes back gets another one.

Prints `ready hciN ADDRESS` once the kernel has made the index (before its
initialisation). SIGTERM or SIGINT closes /dev/vhci: the kernel removes hciN.
Every Reset it ignored or answered is a line on stdout too.
"""

import argparse
import asyncio
import logging
import signal
import sys

from bumble import hci
from bumble.controller import Controller
from bumble.link import LocalLink
from bumble.transport.file import open_file_transport

HCI_VENDOR_PKT = 0xFF
HCI_PRIMARY = 0x00  # vhci's device type byte


class Emulated(Controller):
    """Bumble's controller, ignoring the first `ignore_resets` HCI_Resets."""

    def __init__(self, *args, ignore_resets=0, **kwargs):
        super().__init__(*args, **kwargs)
        self.ignore_resets = ignore_resets

    def on_hci_command_packet(self, command):
        if isinstance(command, hci.HCI_Reset_Command):
            if self.ignore_resets > 0:
                self.ignore_resets -= 1
                print(f"reset ignored ({self.ignore_resets} more to ignore)", flush=True)
                return
            print("reset answered", flush=True)
        super().on_hci_command_packet(command)


async def main(options):
    transport = await open_file_transport(options.vhci)
    index = asyncio.get_running_loop().create_future()

    def data_received(data):
        # vhci answers the device type with [0xFF, type, index (LE16)].
        if data[:1] == bytes([HCI_VENDOR_PKT]) and len(data) == 4:
            if not index.done():
                index.set_result(data[2] | data[3] << 8)  # little-endian (Bumble reads it big-endian)
        else:
            transport.source.parser.feed_data(data)

    transport.source.data_received = data_received
    controller = Emulated("vhci", host_source=transport.source, host_sink=transport.sink, link=LocalLink(),
                          public_address=options.address, ignore_resets=options.ignore_reset)
    transport.sink.on_packet(bytes([HCI_VENDOR_PKT, HCI_PRIMARY]))
    print(f"ready hci{await asyncio.wait_for(index, 10)} {options.address}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def answer_resets():
        controller.ignore_resets = 0
        print("answering every reset from now on", flush=True)

    loop.add_signal_handler(signal.SIGUSR1, answer_resets)
    await stop.wait()
    await transport.close()


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="00:AA:01:02:00:99", help="the controller's public address")
    parser.add_argument("--ignore-reset", type=int, default=0, metavar="N",
                        help="leave the first N HCI_Reset commands unanswered")
    parser.add_argument("--vhci", default="/dev/vhci")
    parser.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main(arguments))
