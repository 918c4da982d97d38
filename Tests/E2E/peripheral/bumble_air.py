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

With --impostor-address, a second dongle on the same air advertises the
same name (another vehicle's, or an attacker's), with --impostor-pairing,
logging to --impostor-event-log whatever a central does to it (make e2e's
agent-impostor: it must never be connected, nor handed a passkey; its
twin-dongle: an identical dongle of another vehicle, heard stronger,
steered by --impostor-control). --dongle-rssi and --impostor-rssi set how
strong each is heard (Bumble hears everyone at -50 dBm).

With --others N, N more advertisers share the air (a busy street: phones,
beacons, other cars), each scannable and not connectable, named
`Street-NN`, every --others-interval ms.

Uses the selftest's FaithfulController and FaithfulLink (Bumble's emulated
controllers and link, closer to real ones where the dongle needs it).
"""

import argparse
import asyncio
import logging
import os
import signal
import struct
import sys

from bumble.transport.common import AsyncPipeSink
from bumble.transport.file import open_file_transport

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import dongle as firmware  # noqa: E402
from selftest import FaithfulController, FaithfulLink  # noqa: E402
from bumble.core import AdvertisingData  # noqa: E402
from bumble.device import AdvertisingType, Device  # noqa: E402
from bumble.hci import Address, OwnAddressType  # noqa: E402

APPLE_COMPANY_ID = 0x004C  # what most of a street's advertisers send

HCI_VENDOR_PKT = 0xFF
HCI_PRIMARY = 0x00


def leave_air(link, controller, peers):
    """`controller` leaves the air: the links its peers had to it end as a
    supervision timeout (0x08) would end them, and nothing reaches it any
    more. Only the gateway's controller connects to anything here."""
    for peer in peers:
        for connection in list(peer.le_connections.values()):
            peer.on_le_disconnected(connection, 0x08)
    if controller in link.controllers:
        link.remove_controller(controller)


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
        leave_air(self.link, self.controller, peers)
        await self.transport.close()
        self.transport = self.controller = None


class Street:
    """Other advertisers on the air: `count` Bumble devices, each on a
    controller of its own at `00:AA:02:00:HH:LL`, advertising scannable and
    not connectable (legacy ADV_SCAN_IND) every `interval_ms`, named
    `Street-NN` in the scan response, heard at -60 to -94 dBm. Nothing
    connects to them; they only show a scanner that the air is busy."""

    def __init__(self, link, count, interval_ms, advertising=True):
        self.interval_ms = interval_ms
        self.advertising = advertising
        self.devices = []
        for index in range(count):
            address = f"00:AA:02:00:{index >> 8:02X}:{index & 0xFF:02X}"
            controller = FaithfulController(f"street-{index}", link=link, public_address=address)
            controller.air_rssi = -60 - index % 35
            self.devices.append(Device.with_hci(f"Street-{index:02d}", Address.ANY_RANDOM, controller,
                                                AsyncPipeSink(controller)))

    async def start(self):
        for device in self.devices:
            await device.power_on()
        if self.advertising:
            self.advertising = False
            await self.set_advertising(True)

    async def set_advertising(self, on):
        """All of them start (or stop) advertising: a street that fills or empties."""
        if on == self.advertising:
            return
        self.advertising = on
        if not on:
            return await self.close()
        for index, device in enumerate(self.devices):
            await device.start_advertising(
                advertising_type=AdvertisingType.UNDIRECTED_SCANNABLE, own_address_type=OwnAddressType.PUBLIC,
                advertising_data=bytes(AdvertisingData([
                    (AdvertisingData.FLAGS, bytes([AdvertisingData.BR_EDR_NOT_SUPPORTED_FLAG])),
                    (AdvertisingData.MANUFACTURER_SPECIFIC_DATA, struct.pack("<HB", APPLE_COMPANY_ID, index & 0xFF))])),
                scan_response_data=bytes(AdvertisingData([
                    (AdvertisingData.COMPLETE_LOCAL_NAME, f"Street-{index:02d}".encode())])),
                advertising_interval_min=self.interval_ms, advertising_interval_max=self.interval_ms)

    async def close(self):
        for device in self.devices:
            try:
                await device.stop_advertising()
            except Exception:  # noqa: BLE001 - shutting down
                pass


class Air:
    """The air and the dongle on it (dongle.py's firmware on an emulated
    controller), with the dongle's control socket: what bumble_air.py and
    usb_controller.py share. Gateways join it with FaithfulController(...,
    link=air.link) and leave it with leave_air(air.link, controller,
    [air.dongle_controller])."""

    def __init__(self, options):
        self.options = options
        self.link = FaithfulLink()
        self.dongle_controller = FaithfulController("dongle", link=self.link, public_address=options.dongle_address)
        if getattr(options, "dongle_rssi", None) is not None:
            self.dongle_controller.air_rssi = options.dongle_rssi
        device = Device.with_hci(options.name, Address.ANY_RANDOM, self.dongle_controller,
                                 AsyncPipeSink(self.dongle_controller))
        # Options made by hand (the self-test's) may leave these out.
        pairing, passkey = firmware.parse_pairing(getattr(options, "pairing", "none"))
        settings = firmware.Settings(options.name, options.sleep_after, options.advertise_for, options.rate,
                                     options.first_seq, pairing=pairing, passkey=passkey)
        self.sent_log, self.events = firmware.JsonLines(options.sent_log), firmware.JsonLines(options.event_log)
        self.dongle = firmware.Dongle(device, settings, self.sent_log, self.events)
        self.control = firmware.Control(self.dongle)
        self.server = self.impostor_server = None
        self.impostor = None
        self.street = Street(self.link, getattr(options, "others", 0), getattr(options, "others_interval", 1000),
                             advertising=not getattr(options, "others_off", False))
        if getattr(options, "impostor_address", None):
            controller = FaithfulController("impostor", link=self.link, public_address=options.impostor_address)
            if getattr(options, "impostor_rssi", None) is not None:
                controller.air_rssi = options.impostor_rssi
            impostor_device = Device.with_hci(options.name, Address.ANY_RANDOM, controller, AsyncPipeSink(controller))
            pairing, passkey = firmware.parse_pairing(options.impostor_pairing)
            impostor_settings = firmware.Settings(options.name, options.sleep_after,
                                                  getattr(options, "impostor_advertise_for", None) or options.advertise_for, options.rate,
                                                  pairing=pairing, passkey=passkey)
            self.impostor_events = firmware.JsonLines(options.impostor_event_log)
            self.impostor_controller = controller
            self.impostor = firmware.Dongle(impostor_device, impostor_settings, firmware.JsonLines(None),
                                            self.impostor_events)
            self.impostor_control = firmware.Control(self.impostor)

    @property
    def peers(self):
        """The controllers on the air besides the gateway's."""
        return [self.dongle_controller] + ([self.impostor_controller] if self.impostor else [])

    async def start(self):
        await self.street.start()
        await self.dongle.start()
        if self.impostor:
            await self.impostor.start()
            if getattr(self.options, "impostor_control", None):
                self.impostor_server = await self.impostor_control.serve(self.options.impostor_control)
        self.server = await self.control.serve(self.options.control)

    async def close(self):
        try:
            await self.street.close()
            if self.impostor:
                await self.impostor.close()
            await self.dongle.close()
        finally:
            for server, path in ((self.server, self.options.control),
                                 (self.impostor_server, getattr(self.options, "impostor_control", None))):
                if server is not None:
                    server.close()
                    os.unlink(path)
            self.sent_log.close()
            self.events.close()

    @staticmethod
    def add_arguments(parser, dongle_address):
        parser.add_argument("--dongle-address", default=dongle_address)
        parser.add_argument("--name", default=firmware.Settings.name)
        parser.add_argument("--sleep-after", type=float, default=firmware.Settings.sleep_after)
        parser.add_argument("--advertise-for", type=float, default=firmware.Settings.advertise_for)
        parser.add_argument("--rate", type=float, default=firmware.Settings.rate)
        parser.add_argument("--first-seq", type=int, default=1)
        parser.add_argument("--control", required=True, help="the dongle's control socket (dongle.py's protocol)")
        parser.add_argument("--sent-log")
        parser.add_argument("--event-log")
        parser.add_argument("--log-level", default="WARNING")
        parser.add_argument("--pairing", default="none", help="the dongle's: none | just-works | passkey:NNNNNN")
        parser.add_argument("--impostor-address", help="a second dongle with the same name at this address")
        parser.add_argument("--impostor-pairing", default="none")
        parser.add_argument("--impostor-event-log")
        parser.add_argument("--impostor-control", help="the impostor's control socket (dongle.py's protocol)")
        parser.add_argument("--impostor-advertise-for", type=float,
                            help="the impostor's advertising window (default: the dongle's)")
        parser.add_argument("--dongle-rssi", type=int, help="how strong the dongle is heard, dBm (Bumble: -50)")
        parser.add_argument("--impostor-rssi", type=int, help="how strong the impostor is heard, dBm")
        parser.add_argument("--others", type=int, default=0, help="other advertisers on the air (a busy street)")
        parser.add_argument("--others-interval", type=int, default=1000, help="their advertising interval, ms")
        parser.add_argument("--others-off", action="store_true",
                            help="the others start silent (usb_controller.py's `street on` starts them)")


async def main(options):
    air = Air(options)
    gateway = Gateway(air.link, options.address)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, air.control.quit.set)
    changes = asyncio.Queue()
    loop.add_signal_handler(signal.SIGUSR2, changes.put_nowait, "unplug")
    loop.add_signal_handler(signal.SIGHUP, changes.put_nowait, "plug")
    await air.start()
    index = await gateway.plug()
    print(f"ready hci{index} {options.address} {air.dongle.address}", flush=True)

    async def follow():
        while True:
            change = await changes.get()
            if change == "unplug":
                await gateway.unplug(peers=air.peers)
                print("unplugged", flush=True)
            elif gateway.transport is None:
                index = await gateway.plug()
                print(f"ready hci{index} {options.address} {air.dongle.address}", flush=True)

    follower = asyncio.create_task(follow())
    try:
        await air.control.quit.wait()
    finally:
        follower.cancel()
        try:
            await air.close()
        finally:
            await gateway.unplug()


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="00:AA:01:03:00:01", help="the gateway controller's address")
    Air.add_arguments(parser, dongle_address="00:AA:01:03:00:02")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main(arguments))
