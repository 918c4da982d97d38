#!/usr/bin/env python3
"""An emulated air of Bumble's own, for controller faults btvirt cannot make:
the gateway's controller (Bumble's emulated controller, given to the kernel
through /dev/vhci as one more hciN) and the dongle (dongle.py's firmware on
a second emulated controller) in this one process, on one LocalLink.

Unlike btvirt's (whose addresses are made from their kernel index), the
gateway's controller keeps its address when it is unplugged and plugged in
again: SIGUSR2 unplugs it (closes /dev/vhci: the kernel removes its hciN),
SIGHUP plugs it in again with the same address (the kernel gives it the
lowest free index, which another controller may have taken meanwhile). The
dongle stays up on the air throughout (its links end when the gateway's
controller goes). Prints `ready hciN ADDRESS DONGLE_ADDRESS` each time the
gateway's controller is plugged in; the dongle's control socket is as
dongle.py's.

Uses the selftest's FaithfulController and FaithfulLink (Bumble's emulated
controllers and link, closer to real ones where the dongle needs it).
"""

import argparse
import asyncio
import logging
import os
import signal
import sys

from bumble.transport.common import AsyncPipeSink
from bumble.transport.file import open_file_transport

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import dongle as firmware  # noqa: E402
from selftest import FaithfulController, FaithfulLink  # noqa: E402
from bumble.device import Device  # noqa: E402
from bumble.hci import Address  # noqa: E402

HCI_VENDOR_PKT = 0xFF
HCI_PRIMARY = 0x00


class Gateway:
    """The gateway's controller on /dev/vhci; plug() and unplug() at will."""

    def __init__(self, link, address):
        self.link, self.address = link, address
        self.transport = self.controller = None

    async def plug(self):
        transport = await open_file_transport("/dev/vhci")
        index = asyncio.get_running_loop().create_future()

        def data_received(data):
            if data[:1] == bytes([HCI_VENDOR_PKT]) and len(data) == 4:
                if not index.done():
                    index.set_result(data[2] | data[3] << 8)  # little-endian
            else:
                transport.source.parser.feed_data(data)

        transport.source.data_received = data_received
        self.controller = FaithfulController("gateway", host_source=transport.source, host_sink=transport.sink,
                                             link=self.link, public_address=self.address)
        transport.sink.on_packet(bytes([HCI_VENDOR_PKT, HCI_PRIMARY]))
        self.transport = transport
        return await asyncio.wait_for(index, 10)

    async def unplug(self, peers=()):
        """The controller goes; its peers on the air see their links to it
        end as a supervision timeout (0x08) would end them."""
        if self.transport is None:
            return
        for peer in peers:  # only the gateway connects to anything on this air
            for connection in list(peer.le_connections.values()):
                peer.on_le_disconnected(connection, 0x08)
        self.link.remove_controller(self.controller)
        await self.transport.close()
        self.transport = self.controller = None


async def main(options):
    link = FaithfulLink()
    dongle_controller = FaithfulController("dongle", link=link, public_address=options.dongle_address)
    device = Device.with_hci(options.name, Address.ANY_RANDOM, dongle_controller, AsyncPipeSink(dongle_controller))
    settings = firmware.Settings(options.name, options.sleep_after, options.advertise_for, options.rate,
                                 options.first_seq)
    sent_log, events = firmware.JsonLines(options.sent_log), firmware.JsonLines(options.event_log)
    dongle = firmware.Dongle(device, settings, sent_log, events)
    control = firmware.Control(dongle)
    gateway = Gateway(link, options.address)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, control.quit.set)
    changes = asyncio.Queue()
    loop.add_signal_handler(signal.SIGUSR2, changes.put_nowait, "unplug")
    loop.add_signal_handler(signal.SIGHUP, changes.put_nowait, "plug")
    await dongle.start()
    server = await control.serve(options.control)
    index = await gateway.plug()
    print(f"ready hci{index} {options.address} {dongle.address}", flush=True)

    async def follow():
        while True:
            change = await changes.get()
            if change == "unplug":
                await gateway.unplug(peers=[dongle_controller])
                print("unplugged", flush=True)
            elif gateway.transport is None:
                index = await gateway.plug()
                print(f"ready hci{index} {options.address} {dongle.address}", flush=True)

    follower = asyncio.create_task(follow())
    try:
        await control.quit.wait()
        await dongle.close()
    finally:
        follower.cancel()
        server.close()
        os.unlink(options.control)
        await gateway.unplug()
        sent_log.close()
        events.close()


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="00:AA:01:03:00:01", help="the gateway controller's address")
    parser.add_argument("--dongle-address", default="00:AA:01:03:00:02")
    parser.add_argument("--name", default=firmware.Settings.name)
    parser.add_argument("--sleep-after", type=float, default=firmware.Settings.sleep_after)
    parser.add_argument("--advertise-for", type=float, default=firmware.Settings.advertise_for)
    parser.add_argument("--rate", type=float, default=firmware.Settings.rate)
    parser.add_argument("--first-seq", type=int, default=1)
    parser.add_argument("--control", required=True)
    parser.add_argument("--sent-log")
    parser.add_argument("--event-log")
    parser.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main(arguments))
