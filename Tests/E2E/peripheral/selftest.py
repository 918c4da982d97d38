#!/usr/bin/env python3
"""Self-test of dongle.py with no Bluetooth hardware and no kernel.

The dongle and a Bumble central each drive one of Bumble's emulated
controllers on one LocalLink, in this process; a last check runs dongle.py
itself as a subprocess, over a TCP HCI transport to a third controller on
the same link. Short timeouts (sleep after 1 s, advertise for 2 s, 20
notifications a second) keep the whole run under a minute.

Prints one PASS line per check; exits 0 when all pass, 1 at the first failure.
"""

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
import socket
import sys
import tempfile
import time
import traceback

from bumble import hci
from bumble.att import (ATT_INSUFFICIENT_ENCRYPTION_ERROR, ATT_READ_NOT_PERMITTED_ERROR,
                        ATT_WRITE_NOT_PERMITTED_ERROR)
from bumble.controller import Controller
from bumble.core import AdvertisingData, PhysicalTransport, ProtocolError
from bumble.device import Device, Peer
from bumble.gatt import (GATT_BATTERY_SERVICE, GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR,
                         GATT_DEVICE_NAME_CHARACTERISTIC, GATT_GENERIC_ATTRIBUTE_SERVICE,
                         GATT_SERVICE_CHANGED_CHARACTERISTIC, Characteristic)
from bumble.link import LocalLink
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport.common import AsyncPipeSink
from bumble.transport.tcp_server import open_tcp_server_transport_with_socket

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import dongle as firmware  # noqa: E402  (next to this file)

SETTINGS = firmware.Settings(name="Tether-E2E", sleep_after=1.0, advertise_for=2.0, rate=20.0)
DONGLE_ADDRESS = "00:AA:01:01:00:24"  # btvirt's style
ALL_EVENTS = {"advertising", "connected", "disconnected", "subscribed", "unsubscribed", "write", "read",
              "sleep", "wake", "refuse-start", "refused", "refuse-end", "control", "hang", "resume",
              "gatt-layout", "identity"}

ReportType = hci.HCI_LE_Extended_Advertising_Report_Event.EventType
Properties = hci.HCI_LE_Set_Extended_Advertising_Parameters_Command.AdvertisingProperties


def expected_payload(seq):
    """Tether's simulator (SimulatedDongle.nextNotification), written out
    again here so a slip in dongle.py cannot check itself."""
    phase = (seq % 3600) / 3600 * 2 * math.pi
    return (seq.to_bytes(4, "little") + int(2150 + 150 * math.sin(phase)).to_bytes(2, "little", signed=True)
            + int(4500 + 500 * math.cos(phase)).to_bytes(2, "little"))


# seq 900: phase pi/2, so 23.00 degC and 45.00 %.
assert expected_payload(900) == bytes.fromhex("84030000" "fc08" "9411")


class Failure(Exception):
    pass


def check(condition, what, detail=""):
    if not condition:
        raise Failure(f"{what}{': ' + detail if detail else ''}")


def passed(what):
    print(f"PASS {what}", flush=True)


# ---------------------------------------------------------------- the air

class FaithfulController(Controller):
    """Bumble's emulated controller, closer to a real one where the test
    needs it: its air carries no scan responses (an active scan gets the
    advertising data twice, always flagged connectable), every advertiser is
    heard at -50 dBm unless its controller sets `air_rssi`, a central connects
    to any advertiser and thinks it is connected before the peripheral
    agreed, and LE Create Connection Cancel never ends the pending attempt.
    """

    def live_set(self, address):
        """The advertiser's enabled advertising set, seen from the air."""
        advertiser = self.link.find_le_controller(address)
        if advertiser is None:
            return None
        return next((s for s in advertiser.advertising_sets.values()
                     if s.enabled and s.address == address), None)

    def send_hci_packet(self, packet):
        if isinstance(packet, hci.HCI_LE_Extended_Advertising_Report_Event):
            reports = [fixed for report in packet.reports if (fixed := self.fix_report(report))]
            if not reports:
                return
            packet = hci.HCI_LE_Extended_Advertising_Report_Event(reports)
        super().send_hci_packet(packet)

    def fix_report(self, report):
        advertising_set = self.live_set(report.address)
        if advertising_set is None:
            return None
        # Bumble reports every advertiser at -50 dBm; an advertiser's
        # controller may say how strong it is heard (air_rssi).
        rssi = getattr(self.link.find_le_controller(report.address), "air_rssi", None)
        if rssi is not None:
            report = dataclasses.replace(report, rssi=rssi)
        properties = advertising_set.parameters.advertising_event_properties
        kind = ReportType.LEGACY_ADVERTISING_PDU_USED
        if properties & Properties.CONNECTABLE_ADVERTISING:
            kind |= ReportType.CONNECTABLE_ADVERTISING
        if properties & Properties.SCANNABLE_ADVERTISING:
            kind |= ReportType.SCANNABLE_ADVERTISING
        if not report.event_type & ReportType.SCAN_RESPONSE:
            return dataclasses.replace(report, event_type=kind)
        if not properties & Properties.SCANNABLE_ADVERTISING:
            return None
        return dataclasses.replace(report, event_type=kind | ReportType.SCAN_RESPONSE,
                                   data=bytes(advertising_set.scan_response_data))

    def create_le_connection(self, peer_address):
        advertising_set = self.live_set(peer_address)
        if advertising_set and advertising_set.parameters.advertising_event_properties & Properties.CONNECTABLE_ADVERTISING:
            super().create_le_connection(peer_address)

    def on_hci_le_create_connection_cancel_command(self, command):
        pending, self.pending_le_connection = self.pending_le_connection, None
        if pending is not None:
            failure = hci.HCI_LE_Connection_Complete_Event(
                status=hci.HCI_ErrorCode.UNKNOWN_CONNECTION_IDENTIFIER_ERROR, connection_handle=0,
                role=hci.Role.CENTRAL, peer_address_type=pending.peer_address_type,
                peer_address=pending.peer_address, connection_interval=0, peripheral_latency=0,
                supervision_timeout=0, central_clock_accuracy=0)
            # After the Command Complete, as a real controller orders them.
            asyncio.get_running_loop().call_soon(self.send_hci_packet, failure)
        return hci.HCI_StatusReturnParameters(hci.HCI_ErrorCode.SUCCESS)


class FaithfulLink(LocalLink):
    """Bumble's LocalLink sends LE data from the sender's random address, even
    on a link made with its public one (ours: the dongle advertises with its
    public address), and the receiver then finds no connection for it."""

    def send_acl_data(self, sender_controller, destination_address, transport, data):
        connection = sender_controller.le_connections.get(destination_address)
        if transport != PhysicalTransport.LE or connection is None:
            return super().send_acl_data(sender_controller, destination_address, transport, data)
        receiver = self.find_le_controller(destination_address)
        if receiver is not None:
            asyncio.get_running_loop().call_soon(
                receiver.on_link_acl_data, connection.self_address, transport, data)


def device_on(link, name, address=None):
    controller = FaithfulController(name, link=link, public_address=address)
    return Device.with_hci(name, hci.Address.ANY_RANDOM, controller, AsyncPipeSink(controller))


# ------------------------------------------------------------ the central

class Link:
    """One connection from the central, with the NUS characteristics found."""

    def __init__(self, connection):
        self.connection = connection
        self.peer = Peer(connection)
        self.closed = asyncio.get_running_loop().create_future()
        connection.on("disconnection", lambda reason: self.closed.done() or self.closed.set_result(reason))
        self.rx = self.tx = None

    async def discover(self):
        """NUS found anew (after a layout change too: the services this
        discovery returned, not what an earlier one cached)."""
        services = await self.peer.discover_services([firmware.NUS_SERVICE])
        service = [s for s in services if s.uuid == firmware.NUS_SERVICE][0]
        await service.discover_characteristics()
        self.rx = service.get_characteristics_by_uuid(firmware.NUS_RX)[0]
        self.tx = service.get_characteristics_by_uuid(firmware.NUS_TX)[0]
        await self.tx.discover_descriptors()

    async def wait_closed(self, seconds):
        return await asyncio.wait_for(asyncio.shield(self.closed), seconds)


class Central:
    def __init__(self, device):
        self.device = device
        self.received = []  # (seq, hex) of every notification, across connections

    async def scan(self, address, seconds):
        """The merged advertisement + scan response last seen from `address`."""
        seen = []
        listener = self.device.on("advertisement", lambda ad: ad.address == address and seen.append(ad))
        await self.device.start_scanning(active=True)
        await asyncio.sleep(seconds)
        await self.device.stop_scanning()
        self.device.remove_listener("advertisement", listener)
        return seen[-1] if seen else None

    async def connect(self, address, timeout=2.0):
        connection = await self.device.connect(address, transport=PhysicalTransport.LE, timeout=timeout)
        return Link(connection)

    async def open(self, address):
        """Connect, discover NUS and subscribe to TX."""
        link = await self.connect(address)
        await link.discover()
        await link.tx.subscribe(self.on_notification)
        return link

    def on_notification(self, value):
        self.received.append((int.from_bytes(value[:4], "little"), bytes(value).hex()))

    async def close(self, link):
        """A polite central: notifications off, then disconnect."""
        await link.tx.unsubscribe(self.on_notification)
        await asyncio.sleep(0.2)
        await link.connection.disconnect()
        await link.wait_closed(2)


# ------------------------------------------------------- control socket

class ControlClient:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, path):
        return cls(*await asyncio.open_unix_connection(path))

    async def send(self, *lines):
        self.writer.write(b"".join(line.encode("utf-8", "surrogateescape") + b"\n" for line in lines))
        await self.writer.drain()
        return [json.loads(await asyncio.wait_for(self.reader.readline(), 5)) for _ in lines]

    async def __call__(self, line):
        reply = (await self.send(line))[0]
        check(reply.get("ok"), f"control {line!r}", json.dumps(reply))
        return reply

    def close(self):
        self.writer.close()


def read_jsonl(path):
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file]


async def eventually(condition, seconds, step=0.05):
    """Whether `condition()` holds within `seconds`, asked every `step`."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(step)
    return condition()


async def connect_fails(central, address, timeout=0.6):
    """How a connect failed: it never completed, or the dongle dropped the
    link at once. None if the link held."""
    try:
        link = await central.connect(address, timeout=timeout)
    except Exception:  # bumble's TimeoutError or ConnectionError
        return "timed out"
    try:
        return f"dropped, reason 0x{await link.wait_closed(1.0):02x}"
    except asyncio.TimeoutError:
        await link.connection.disconnect()
        return None


# --------------------------------------------------------------- checks

class InProcess:
    """The dongle, its control socket and a central, all in this process;
    one method per check, run in order (each starts where the last ended)."""

    def __init__(self, work):
        self.air = FaithfulLink()
        self.central = Central(device_on(self.air, "central"))
        self.sent_path, self.events_path, self.control_path = (
            os.path.join(work, name) for name in ("sent.jsonl", "events.jsonl", "control.sock"))
        self.dongle = firmware.Dongle(device_on(self.air, "dongle", DONGLE_ADDRESS), SETTINGS,
                                      firmware.JsonLines(self.sent_path), firmware.JsonLines(self.events_path))
        self.control = firmware.Control(self.dongle)
        self.address = hci.Address(DONGLE_ADDRESS, hci.Address.PUBLIC_DEVICE_ADDRESS)
        self.link = None

    async def start(self):
        await self.central.device.power_on()
        await self.dongle.start()
        self.server = await self.control.serve(self.control_path)
        self.ctl = await ControlClient.open(self.control_path)

    async def status(self):
        return await self.ctl("status")

    async def status_becomes(self, predicate, seconds):
        deadline = time.monotonic() + seconds
        while not predicate(reply := await self.status()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return predicate(reply)

    def events(self):
        return read_jsonl(self.events_path)

    async def advertising(self):
        reply = await self.status()
        check(reply["state"] == "advertising" and reply["address"] == DONGLE_ADDRESS
              and reply["address_type"] == "public", "status after start", json.dumps(reply))
        ad = await self.central.scan(self.address, 0.5)
        check(ad is not None, "the central finds the dongle by scanning")
        uuids = ad.data.get(AdvertisingData.COMPLETE_LIST_OF_128_BIT_SERVICE_CLASS_UUIDS) or []
        check(firmware.NUS_SERVICE in uuids, "NUS UUID advertised", str(ad.data))
        check(ad.data.get(AdvertisingData.COMPLETE_LOCAL_NAME) == SETTINGS.name, "name in the scan response",
              str(ad.data))
        check(ad.data.get(AdvertisingData.MANUFACTURER_SPECIFIC_DATA) == (firmware.NORDIC_COMPANY_ID, b""),
              "Nordic company id", str(ad.data))
        check(ad.is_connectable and ad.address.is_public, "connectable, public address")
        passed(f"scan: {DONGLE_ADDRESS} (public), connectable, NUS UUID + Nordic 0x0059 in the data, "
               f"name {SETTINGS.name!r} in the scan response")

    async def gatt(self):
        self.link = link = await self.central.open(self.address)
        both = Characteristic.Properties.WRITE | Characteristic.Properties.WRITE_WITHOUT_RESPONSE
        check(link.rx.properties == both, "RX properties", str(link.rx.properties))
        check(link.tx.properties == Characteristic.Properties.NOTIFY, "TX properties", str(link.tx.properties))
        check(link.tx.get_descriptor(GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR) is not None, "TX has a CCC")
        # As a real GATT server: RX is not readable, a declaration not writable.
        errors = []
        for request in (lambda: link.rx.read_value(),
                        lambda: link.peer.gatt_client.write_value(link.tx.handle - 1, b"\x00\x00", with_response=True)):
            try:
                await request()
                errors.append(None)
            except ProtocolError as error:
                errors.append(error.error_code)
        check(errors == [ATT_READ_NOT_PERMITTED_ERROR, ATT_WRITE_NOT_PERMITTED_ERROR], "ATT permission errors",
              str(errors))
        passed("connect: NUS discovered, RX write + write-without-response, TX notify with CCC, subscribed; "
               "reading RX: Read Not Permitted, writing a declaration: Write Not Permitted")

    async def writes_keep_awake(self):
        started = time.monotonic()
        for i in range(12):
            await self.link.rx.write_value(bytes([i]), with_response=i % 2 == 0)
            await asyncio.sleep(0.3)
        held = time.monotonic() - started
        reply = await self.status()
        check(not self.link.closed.done() and reply["state"] == "connected" and reply["sleeps"] == 0,
              "writes keep the link", json.dumps(reply))
        received = self.central.received
        seqs = [seq for seq, _ in received]
        check(seqs == list(range(1, len(seqs) + 1)), "notification seqs 1, 2, 3 ... in order", str(seqs[:10]))
        check(len(seqs) >= held * SETTINGS.rate * 0.8, "notification rate", f"{len(seqs)} in {held:.1f} s")
        wrong = [(seq, h) for seq, h in received if h != expected_payload(seq).hex()]
        check(not wrong, "payloads as the simulator's", str(wrong[:3]))
        passed(f"keep-alive by writes: connected for {held:.1f} s (sleep_after {SETTINGS.sleep_after} s); "
               f"{len(seqs)} notifications, seq 1..{seqs[-1]} in order, payloads exact")

    async def reads_keep_awake(self):
        started = time.monotonic()
        for _ in range(7):
            await asyncio.sleep(0.3)
            await self.link.peer.read_characteristics_by_uuid(GATT_DEVICE_NAME_CHARACTERISTIC)
        self.last_activity = time.monotonic()
        check(not self.link.closed.done(), "reads keep the link")
        passed(f"keep-alive by reads: connected for {self.last_activity - started:.1f} s reading the GAP name")

    async def idle_sleep(self):
        reason = await self.link.wait_closed(SETTINGS.sleep_after + 1.5)
        idle = time.monotonic() - self.last_activity
        check(reason == firmware.REASON_TERMINATED, "idle disconnect reason", hex(reason))
        check(SETTINGS.sleep_after - 0.1 <= idle <= SETTINGS.sleep_after + 0.5, "idle deadline", f"{idle:.2f} s")
        reply = await self.status()
        check(reply["state"] == "asleep" and reply["sleeps"] == 1, "asleep after idle", json.dumps(reply))
        passed(f"idle: dropped with 0x13 after {idle:.2f} s without traffic, asleep")

    async def asleep_until_woken(self):
        check(await self.central.scan(self.address, 1.0) is None, "asleep dongle is not advertising")
        failed = await connect_fails(self.central, self.address)
        check(failed is not None, "connect to a sleeping dongle fails")
        check((await self.status())["state"] == "asleep", "still asleep")
        reply = await self.ctl("wake")
        check(reply["was_asleep"] is True, "wake reply", json.dumps(reply))
        check(await self.central.scan(self.address, 0.5) is not None, "advertising after wake")
        passed(f"asleep: scan finds nothing for 1 s, connect {failed}; `wake` -> advertising again")

    async def disconnect_command(self):
        received = self.central.received
        before = len(received)
        link = await self.central.open(self.address)
        await asyncio.sleep(0.3)
        check(received[before][0] == received[before - 1][0] + 1, "seq continues across connections")
        await self.ctl("disconnect")
        reason = await link.wait_closed(1.0)
        check(reason == firmware.REASON_TERMINATED, "disconnect reason", hex(reason))
        check((await self.status())["state"] == "advertising", "advertising after disconnect")
        check(await self.central.scan(self.address, 0.5) is not None, "found after disconnect")
        passed(f"`disconnect`: link dropped with 0x13, advertising again; seq continued at {received[before][0]}")

    async def refuse(self):
        await self.ctl("refuse 2")
        refused_at = time.monotonic()
        check((await self.status())["refusing_for"] > 1.5, "refusing_for")
        check(await self.central.scan(self.address, 0.3) is not None, "advertising while refusing")
        outcomes = [await connect_fails(self.central, self.address) for _ in range(2)]
        check(all(outcomes), "connects fail while refusing", str(outcomes))
        check(await self.status_becomes(lambda r: r["refusing_for"] == 0, 3), "refusal ends")
        waited = time.monotonic() - refused_at
        self.link = await self.central.open(self.address)
        await asyncio.sleep(0.5)
        check(not self.link.closed.done() and (await self.status())["refused"] == 2, "connect after the window")
        passed(f"`refuse 2`: still advertising, connects {outcomes}; after {waited:.1f} s a connect holds")

    async def hang_and_resume(self):
        """`hang`: the link stays, writes are taken, no telemetry, no idle
        sleep (idle for three sleep_after); a central that reconnects meanwhile
        gets the link but no data; `resume`: telemetry continues, no seq lost."""
        received = self.central.received
        await asyncio.sleep(0.3)
        sleeps = (await self.status())["sleeps"]
        reply = await self.ctl("hang")
        check(reply["was_running"] is True and (await self.status())["hung"] is True, "hang reply", json.dumps(reply))
        last = received[-1][0]
        await self.link.rx.write_value(b"\x00", with_response=False)
        await self.link.rx.write_value(b"\x01", with_response=True)  # answered by the stack
        await asyncio.sleep(SETTINGS.sleep_after * 3)
        reply = await self.status()
        check(not self.link.closed.done() and reply["state"] == "connected" and reply["sleeps"] == sleeps,
              "hung: the link stays, no sleep", json.dumps(reply))
        check(received[-1][0] == last, "hung: no notifications", f"{received[-1][0]} after {last}")
        writes = [e for e in self.events() if e["event"] == "write" and e["t"] > time.monotonic() - 5]
        check(len(writes) >= 2, "hung: writes accepted", str(writes))
        # The central gives up on the link and comes back: still no data.
        await self.link.connection.disconnect()
        await self.link.wait_closed(1)
        check(await self.status_becomes(lambda r: r["state"] == "advertising", 1), "hung: advertising after the drop")
        self.link = await self.central.open(self.address)
        await asyncio.sleep(SETTINGS.sleep_after * 1.5)
        check(not self.link.closed.done() and received[-1][0] == last and (await self.status())["sleeps"] == sleeps,
              "hung: reconnected, no data, no sleep")
        resumed = time.monotonic()
        check((await self.ctl("resume"))["was_hung"] is True, "resume reply")
        check(await self.status_becomes(lambda r: r["seq"] > last, 1), "telemetry after resume")
        await asyncio.sleep(0.2)
        check(received[-1][0] > last and [s for s, _ in received if s > last][0] == last + 1,
              "resume: seq continues", str(received[-3:]))
        check((await self.ctl("resume"))["was_hung"] is False, "resume twice")
        # Awake again: the idle deadline applies (kept off by writes here).
        for i in range(4):
            await self.link.rx.write_value(bytes([i]), with_response=False)
            await asyncio.sleep(0.3)
        check(not self.link.closed.done(), "writes keep the link after resume")
        passed(f"`hang`: link and writes kept, no telemetry and no sleep for {SETTINGS.sleep_after * 3:.0f} s, "
               f"reconnect while hung gets no data; `resume`: seq {last + 1} next, "
               f"{time.monotonic() - resumed:.1f} s of writes after keep the link")

    async def service_changed(self):
        """`gatt extra` while connected: a Battery Service appears before NUS,
        NUS moves, the central gets a Service Changed indication for the moved
        range; TX notifications stop until it subscribes at the new handle.
        `gatt base drop`: back, across a dropped link."""
        received = self.central.received
        gatt_service = (await self.link.peer.discover_services([GATT_GENERIC_ATTRIBUTE_SERVICE]))[0]
        await gatt_service.discover_characteristics()
        changed = gatt_service.get_characteristics_by_uuid(GATT_SERVICE_CHANGED_CHARACTERISTIC)[0]
        indications = []
        await changed.subscribe(lambda value: indications.append(bytes(value)), prefer_notify=False)
        old_tx = self.link.tx.handle
        reply = await self.ctl("gatt extra")
        check(reply["indicated"] is True and reply["layout"] == "extra" and reply["tx_handle_before"] == old_tx
              and reply["tx_handle"] == old_tx + 4, "gatt extra reply", json.dumps(reply))
        await asyncio.sleep(0.2)
        first = reply["first_changed_handle"]
        check(indications == [first.to_bytes(2, "little") + b"\xff\xff"], "Service Changed indication",
              str(indications))
        check(first <= old_tx - 4, "the range starts at the inserted service", f"{first} vs TX {old_tx}")
        last = received[-1][0]
        await asyncio.sleep(0.5)
        check(received[-1][0] == last and (await self.status())["seq"] == last,
              "no TX notifications until subscribed again", f"{received[-1][0]} after {last}")
        await self.link.discover()
        check(self.link.tx.handle == old_tx + 4, "TX found at the new handle", str(self.link.tx.handle))
        battery = await self.link.peer.discover_services([GATT_BATTERY_SERVICE])
        check(len(battery) == 1 and battery[0].handle < self.link.tx.handle, "Battery Service before NUS")
        await self.link.tx.subscribe(self.central.on_notification)
        await asyncio.sleep(0.5)
        new = [seq for seq, _ in received if seq > last]
        check(new and new == list(range(last + 1, last + 1 + len(new))), "telemetry on the new handle, seq goes on",
              str(new[:5]))
        # A reboot into the old layout: the link drops, the dongle advertises.
        reply = await self.ctl("gatt base drop")
        check(reply["dropped"] is True and reply["indicated"] is False and reply["tx_handle"] == old_tx,
              "gatt base drop reply", json.dumps(reply))
        check(await self.link.wait_closed(1) == firmware.REASON_TERMINATED, "gatt drop: link dropped with 0x13")
        check((await self.status())["state"] == "advertising", "gatt drop: advertising")
        self.link = await self.central.open(self.address)
        check(self.link.tx.handle == old_tx, "TX back at its old handle after the reboot")
        await asyncio.sleep(0.3)
        check(received[-1][0] > new[-1], "telemetry after the reboot")
        bad = await self.ctl.send("gatt", "gatt fancy", "gatt base later")
        check(all(r["ok"] is False for r in bad), "bad gatt commands refused", json.dumps(bad))
        passed(f"`gatt extra`: Service Changed 0x{first:04x}-0xffff indicated, TX 0x{old_tx:04x} -> 0x{old_tx + 4:04x}, "
               "telemetry only after subscribing there, seq continuous; `gatt base drop`: link dropped, TX back")

    async def disconnect_reason(self):
        link = self.link
        reply = await self.ctl("disconnect 0x08")
        reason = await link.wait_closed(1.0)
        check(reply["reason"] == 8 and reason == 0x08, "disconnect 0x08: the central sees 0x08", hex(reason))
        check(await self.status_becomes(lambda r: r["state"] == "advertising", 1), "advertising after disconnect 0x08")
        bad = await self.ctl.send("disconnect 0", "disconnect x", "disconnect 0x100")
        check(all(r["ok"] is False for r in bad), "bad reasons refused", json.dumps(bad))
        self.link = await self.central.open(self.address)
        passed("`disconnect 0x08`: the central's link ends with reason 0x08 (a supervision timeout's), "
               "advertising again")

    async def identity(self):
        """`address random`: the dongle reboots into a static random identity
        (its public address with the top bits set); the old one no longer
        connects. `address public`: back."""
        random_text = "C0" + DONGLE_ADDRESS[2:]
        reply = await self.ctl("address random")
        check(reply["address"] == random_text and reply["address_type"] == "random" and reply["dropped"] is True,
              "address random reply", json.dumps(reply))
        await self.link.wait_closed(1)
        random = hci.Address(random_text, hci.Address.RANDOM_DEVICE_ADDRESS)
        check(await self.central.scan(random, 0.5) is not None, "advertising the random identity")
        check(await self.central.scan(self.address, 0.5) is None, "the public identity is gone from the air")
        old = await connect_fails(self.central, self.address)
        check(old is not None, "a connect to the old identity fails")
        before = len(self.central.received)
        link = await self.central.open(random)
        await asyncio.sleep(0.3)
        reply = await self.status()
        check(len(self.central.received) > before and reply["advertised_address"] == random_text
              and reply["address_type"] == "random", "telemetry on the random identity", json.dumps(reply))
        reply = await self.ctl("address public")
        check(reply["address"] == DONGLE_ADDRESS and reply["dropped"] is True, "address public reply", json.dumps(reply))
        await link.wait_closed(1)
        self.link = await self.central.open(self.address)
        bad = await self.ctl.send("address", "address private", "address random nonsense", "address public C0:00:00:00:00:01")
        check(all(r["ok"] is False for r in bad), "bad address commands refused", json.dumps(bad))
        passed(f"`address random`: advertising as {random_text} (random), a connect to the public identity "
               f"{old}, telemetry on the new one; `address public`: back")

    async def bootloader(self):
        """`bootloader on`: the link drops, DfuTarg (the DFU service 0xFE59)
        advertises at the address with its last octet plus one, the dongle's
        own address is gone and a connect to the bootloader is refused;
        `bootloader off`: the dongle is back."""
        boot_text = DONGLE_ADDRESS[:-2] + f"{(int(DONGLE_ADDRESS[-2:], 16) + 1) & 0xFF:02X}"
        reply = await self.ctl("bootloader on")
        check(reply.get("bootloader") == boot_text, "bootloader on reply", json.dumps(reply))
        await self.link.wait_closed(1)
        boot = hci.Address(boot_text, hci.Address.RANDOM_DEVICE_ADDRESS)
        ad = await self.central.scan(boot, 0.5)
        check(ad is not None and ad.data.get(AdvertisingData.COMPLETE_LOCAL_NAME) == "DfuTarg",
              "DfuTarg advertises at the address plus one", str(ad.data) if ad else "nothing heard")
        check(await self.central.scan(self.address, 0.5) is None, "the dongle's own address is gone from the air")
        reply = await self.ctl("bootloader off")
        check(reply.get("bootloader") is None, "bootloader off reply", json.dumps(reply))
        self.link = await self.central.open(self.address)
        bad = await self.ctl.send("bootloader", "bootloader maybe")
        check(all(r["ok"] is False for r in bad), "bad bootloader commands refused", json.dumps(bad))
        passed(f"`bootloader on`: DfuTarg at {boot_text}, the dongle gone; `bootloader off`: back, telemetry again")

    async def central_leaves(self):
        await self.central.close(self.link)
        check(await self.status_becomes(lambda r: r["state"] == "advertising", 1), "advertising after the central left")
        passed("central disconnects: the dongle advertises again")

    async def refuse_silently(self):
        await self.ctl("refuse 1.5 silent")
        ad = await self.central.scan(self.address, 0.3)
        check(ad is not None and not ad.is_connectable, "silent refusal: scannable, not connectable")
        failed = await connect_fails(self.central, self.address, timeout=0.5)
        check(failed == "timed out", "silent refusal: connect times out", str(failed))
        check(await self.status_becomes(lambda r: r["refusing_for"] == 0, 2), "silent refusal ends")
        ad = await self.central.scan(self.address, 0.3)
        check(ad is not None and ad.is_connectable, "connectable again after silent refusal")
        passed("`refuse 1.5 silent`: seen but not connectable, connect timed out; connectable after")

    async def advertise_timeout(self):
        check(await self.status_becomes(lambda r: r["state"] == "asleep", SETTINGS.advertise_for + 1),
              "asleep after advertise_for")
        # The dongle writes the event line once it has gone quiet, a moment
        # after its state says asleep (seen 1 run in ~20).
        def causes():
            return [e["cause"] for e in self.events() if e["event"] == "sleep"]
        check(await eventually(lambda: causes() == ["idle", "advertise-timeout"], 2), "sleep causes", str(causes()))
        check(await self.central.scan(self.address, 0.5) is None, "not advertising after advertise-timeout")
        passed(f"advertise_for: asleep {SETTINGS.advertise_for} s after the last disconnect, not advertising")

    async def sleep_command(self):
        await self.ctl("wake")
        link = await self.central.open(self.address)
        await asyncio.sleep(0.2)
        reply = await self.ctl("sleep")
        check(reply["was_awake"] is True and await link.wait_closed(1) == firmware.REASON_TERMINATED,
              "sleep drops the link")
        check((await self.ctl("sleep"))["was_awake"] is False and (await self.status())["state"] == "asleep",
              "sleep twice")
        check((await self.ctl("wake"))["was_asleep"] is True, "wake after sleep")
        self.stale_connection = link.connection
        passed("`sleep` while connected: link dropped with 0x13, asleep; `wake` advertises")

    async def sent_log_matches(self):
        await asyncio.sleep(0.1)
        sent = [(line["seq"], line["hex"]) for line in read_jsonl(self.sent_path)]
        received = self.central.received
        first_difference = next((i for i, (a, b) in enumerate(zip(sent, received)) if a != b),
                                min(len(sent), len(received)))
        check(sent == received, "sent log == received",
              f"{len(sent)} sent, {len(received)} received; first difference at {first_difference}")
        check([seq for seq, _ in sent] == list(range(1, len(sent) + 1)), "sent seqs contiguous from 1")
        passed(f"sent log matches the central: {len(sent)} notifications, seq 1..{sent[-1][0]}, identical bytes")

    async def control_protocol(self):
        other = await ControlClient.open(self.control_path)
        replies = await asyncio.gather(self.ctl.send("status", "rate 5", "status"), other.send("status", "status"))
        check(all(r["ok"] for rs in replies for r in rs) and replies[0][2]["rate"] == 5, "pipelined commands",
              json.dumps(replies))
        bad = ["", "bogus", "rate x", "rate -1", "rate nan", "refuse", "refuse 1 loud", "disconnect", "wake now",
               "status extra", "\udcff\udcfe", "hang now", "resume now", "gatt extra drop now", "disconnect 0x13 0x13"]
        replies = await other.send(*bad)
        check(all(r["ok"] is False and r["error"] for r in replies), "bad commands answered with errors",
              json.dumps(replies))
        check((await self.status())["state"] == "advertising", "alive after bad commands")
        other.close()
        await self.ctl(f"rate {SETTINGS.rate}")
        passed(f"control: 2 clients, pipelined commands, {len(bad)} bad commands each answered ok=false")

    async def robustness(self):
        # A CCC write and an RX write arriving for a link already gone.
        counted = len(self.events())
        self.dongle.device.gatt_server.write_cccd(self.stale_connection, self.dongle.tx, b"\x01\x00")
        await self.dongle.rx.write_value(self.stale_connection, b"\x01")
        check(len(self.events()) == counted, "stale writes leave no trace")
        # The central vanishing while notifications stream at 200/s.
        link = await self.central.open(self.address)
        await self.ctl("rate 200")
        await asyncio.sleep(0.3)
        await link.connection.disconnect()  # no unsubscribe: notifications are in flight
        await link.wait_closed(1)
        await self.ctl(f"rate {SETTINGS.rate}")
        reply = await self.status()
        check(reply["state"] == "advertising" and not reply["subscribed"], "survives an abrupt disconnect",
              json.dumps(reply))
        sent = {(line["seq"], line["hex"]) for line in read_jsonl(self.sent_path)}
        seqs = [seq for seq, _ in self.central.received]
        check(set(self.central.received) <= sent and seqs == sorted(set(seqs)), "received: sent ones, in order, once")
        errors = [e for e in self.events() if e["event"] == "error"]
        check(not errors, "no errors in the event log", json.dumps(errors))
        passed("robust: stale CCC and RX writes ignored; central vanishing at 200 notifications/s; no errors logged")

    async def event_log(self):
        events = self.events()
        check(all(isinstance(e["t"], float) for e in events), "events have t")
        missing = ALL_EVENTS - {e["event"] for e in events}
        check(not missing, "event log has every kind", str(missing))
        passed(f"event log: {len(events)} lines, every kind present")

    async def quit(self):
        await self.ctl("quit")
        check(self.control.quit.is_set(), "quit")
        self.ctl.close()
        self.server.close()
        await self.dongle.close()
        passed("`quit` acknowledged; dongle closed")

    async def run(self):
        await self.start()
        for step in (self.advertising, self.gatt, self.writes_keep_awake, self.reads_keep_awake, self.idle_sleep,
                     self.asleep_until_woken, self.disconnect_command, self.refuse, self.hang_and_resume,
                     self.service_changed, self.disconnect_reason, self.identity, self.bootloader, self.central_leaves,
                     self.refuse_silently, self.advertise_timeout, self.sleep_command, self.sent_log_matches,
                     self.control_protocol, self.robustness, self.event_log, self.quit):
            await step()


async def subprocess_run(work, link_air, central):
    """dongle.py as the guest runs it, but over TCP to an emulated controller."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    transport = await open_tcp_server_transport_with_socket(listener)
    address_text = "00:AA:01:02:00:25"
    FaithfulController("subprocess", host_source=transport.source, host_sink=transport.sink,
                       link=link_air, public_address=address_text)
    control_path = os.path.join(work, "sub.sock")
    sent_path = os.path.join(work, "sub-sent.jsonl")
    process = await asyncio.create_subprocess_exec(
        sys.executable, os.path.join(HERE, "dongle.py"), "--transport", f"tcp-client:127.0.0.1:{port}",
        "--sleep-after", "1", "--advertise-for", "5", "--rate", "20", "--first-seq", "101", "--control", control_path,
        "--sent-log", sent_path, "--event-log", os.path.join(work, "sub-events.jsonl"),
        stdout=asyncio.subprocess.PIPE)
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 10)).decode().strip()
        check(line == f"ready {address_text}", "ready line", repr(line))
        address = hci.Address(address_text, hci.Address.PUBLIC_DEVICE_ADDRESS)
        check(await central.scan(address, 0.5) is not None, "subprocess dongle advertises")
        before = len(central.received)
        link = await central.open(address)
        await asyncio.sleep(0.5)
        ctl = await ControlClient.open(control_path)
        reply = await ctl("status")
        ctl.close()
        got = central.received[before:]
        check(reply["state"] == "connected" and got and got[0][0] == 101, "subprocess telemetry from --first-seq",
              json.dumps(reply))
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 5)
        check(code == 0, "exit status after SIGTERM", str(code))
        reason = await link.wait_closed(2)
        check(not os.path.exists(control_path), "control socket removed")
        sent = [(entry["seq"], entry["hex"]) for entry in read_jsonl(sent_path)]
        check(sent == got, "subprocess sent log == received", f"{len(sent)} vs {len(got)}")
        passed(f"dongle.py: '{line}', {len(got)} notifications, SIGTERM -> exit 0, "
               f"link dropped with 0x{reason:02x}, sent log matches")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        transport.server.close()


async def usb_bridge_run(work):
    """usb_controller.py's bridge over pipes standing in for FunctionFS's
    files: ep0 events and an HCI command's data stage in, events on the
    interrupt endpoint, ACL on the bulk ones (split across reads), and the
    faults: the first Reset ignored, stop-answering until a re-enumeration,
    a new address after one."""
    import struct
    import usb_controller as usb
    options = argparse_namespace(control=os.path.join(work, "usb-dongle.sock"), dongle_address="00:AA:01:04:00:02",
                                 name=SETTINGS.name, sleep_after=60, advertise_for=60, rate=0, first_seq=1,
                                 sent_log=None, event_log=None)
    air = usb.Air(options)
    await air.start()
    ep0_in, ep0 = os.pipe()
    events, ep1 = os.pipe()
    acl_in, ep2 = os.pipe()
    ep3, acl_out = os.pipe()

    class Pipes:
        eps = {"ep1": ep1, "ep2": ep2, "ep3": ep3}

        def attached(self):
            return True

    gadget = Pipes()
    gadget.ep0 = ep0_in
    address = hci.Address("00:AA:01:04:00:01", hci.Address.PUBLIC_DEVICE_ADDRESS)
    bridge = usb.Bridge(air, gadget, address, ignore_first_reset=True)
    import controller_bridge
    usb.say = controller_bridge.say = lambda _text: None  # its progress lines
    bridge.start_threads()
    loop = asyncio.get_running_loop()

    def ep0_event(kind, request_type=0, length=0):
        os.write(ep0, struct.pack("<BBHHHB3x", request_type, 0, 0, 0, length, kind))

    def command(opcode, parameters=b""):
        data = struct.pack("<HB", opcode, len(parameters)) + parameters
        ep0_event(4, 0x20, len(data))  # SETUP: class, host to device, recipient device
        os.write(ep0, data)  # the data stage

    pending = bytearray()  # a pipe is a byte stream: one read may hold several events, or part of one

    async def event(timeout=2):
        """The next whole event (code, length, parameters), as the interrupt
        endpoint delivers them one at a time."""
        deadline = loop.time() + timeout
        while len(pending) < 2 or len(pending) < 2 + pending[1]:
            chunk = await asyncio.wait_for(loop.run_in_executor(None, os.read, events, 300),
                                           max(0.0, deadline - loop.time()))
            if not chunk:
                raise Failure("bridge: the event pipe closed")
            pending.extend(chunk)
        size = 2 + pending[1]
        packet = bytes(pending[:size])
        del pending[:size]
        return packet

    async def completed(opcode):
        """The Command Complete for `opcode` (other events skipped)."""
        while True:
            packet = await event()
            if packet[:1] == b"\x0e" and struct.unpack_from("<H", packet, 3)[0] == opcode:
                return packet

    async def settle(condition, what):
        check(await eventually(condition, 1, step=0.02), what, json.dumps(bridge.status()))

    try:
        ep0_event(2)  # ENABLE
        command(0x0C03)
        await settle(lambda: bridge.counts["ignored"] == 1, "bridge: the first HCI_Reset ignored")
        command(0x0C03)
        check(await event() == bytes.fromhex("0e0401030c00"), "bridge: HCI_Reset answered on the interrupt endpoint")
        command(0x1009)
        check((await completed(0x1009))[6:12] == bytes(address.address_bytes), "bridge: Read BD_ADDR")
        command(0x0C01, bytes.fromhex("ffffffffffffff3f"))
        await completed(0x0C01)
        command(0x2001, bytes.fromhex("ff0f000000000000"))
        await completed(0x2001)
        peer = bytes(hci.Address("00:AA:01:04:00:02").address_bytes)
        command(0x200D, struct.pack("<HHBB6sBHHHHHH", 0x60, 0x30, 0, 0, peer, 0, 0x18, 0x28, 0, 0x1F4, 0, 0))
        check((await event())[:1] == b"\x0f", "bridge: LE Create Connection status")
        complete = await event()
        check(complete[:1] == b"\x3e" and complete[3] == 0, "bridge: LE Connection Complete", complete.hex())
        handle = struct.unpack_from("<H", complete, 4)[0]
        l2cap = struct.pack("<HH", 3, 4) + bytes([0x02, 0x00, 0x02])  # ATT Exchange MTU request
        acl = struct.pack("<HH", handle, len(l2cap)) + l2cap
        os.write(acl_out, acl[:5])
        await asyncio.sleep(0.05)
        os.write(acl_out, acl[5:])
        answer = await asyncio.wait_for(loop.run_in_executor(None, os.read, acl_in, 300), 2)
        check(answer[8:9] == b"\x03", "bridge: ACL both ways (ATT MTU answered on the bulk IN endpoint)", answer.hex())
        bridge.stop_answering()
        command(0x1009)
        await settle(lambda: bridge.counts["ignored"] == 2, "bridge: stop-answering ignores commands")
        bridge.new_address("00:AA:01:04:00:03")
        ep0_event(3)  # DISABLE (a USB reset)
        ep0_event(2)  # ENABLE again
        await settle(lambda: bridge.counts["enables"] == 2, "bridge: enabled again")
        await settle(lambda: air.dongle.status()["state"] == "advertising", "bridge: the dongle's link ended with the reset")
        command(0x1009)
        check((await completed(0x1009))[6:12] == bytes(hci.Address("00:AA:01:04:00:03").address_bytes),
              "bridge: answering again after the reset, under the new address")
    finally:
        await air.close()
        # The ends the test writes to or the bridge writes to: closed, so an
        # executor thread still blocked on a read sees EOF and asyncio.run's
        # executor shutdown does not wait for it forever (a failed check once
        # hung CI until its time limit).
        for fd in (ep0, ep1, ep2, acl_out):
            with contextlib.suppress(OSError):
                os.close(fd)
    passed("usb_controller.py's bridge over pipes: first Reset ignored, commands, events, ACL both ways, "
           "stop-answering, a reset with a new address")


class TypedPasskey(PairingDelegate):
    """The central's keyboard: it types `passkey` when asked."""

    def __init__(self, passkey):
        super().__init__(PairingDelegate.IoCapability.DISPLAY_OUTPUT_AND_KEYBOARD_INPUT)
        self.passkey = passkey

    async def get_number(self):
        return self.passkey


async def pairing_run(work):
    """`--pairing passkey:NNNNNN` in process, on an air of its own: TX's CCC
    descriptor (the dongle's own, not Bumble's) and RX writes refuse an
    unencrypted link with Insufficient Encryption (0x0F), a write without
    response is dropped; a wrong passkey fails, the right one pairs (an
    authenticated key, the passkey displayed); the key encrypts the next
    link; after `forget-keys` the dongle answers the central's key with a
    negative reply and the central's controller reports PIN or Key Missing."""
    passkey = 123456
    # What is refused here on purpose Bumble logs as errors (a traceback for
    # the dropped write without response, each failed pairing): not for the console.
    for name in ("bumble.gatt_server", "bumble.smp"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    air = FaithfulLink()
    central = Central(device_on(air, "pairing-central"))
    events_path = os.path.join(work, "pairing-events.jsonl")
    settings = dataclasses.replace(SETTINGS, sleep_after=30.0, advertise_for=30.0, pairing="passkey", passkey=passkey)
    dongle = firmware.Dongle(device_on(air, "pairing-dongle", DONGLE_ADDRESS), settings,
                             firmware.JsonLines(None), firmware.JsonLines(events_path))
    control = firmware.Control(dongle)
    address = hci.Address(DONGLE_ADDRESS, hci.Address.PUBLIC_DEVICE_ADDRESS)
    typed = TypedPasskey(passkey)
    central.device.pairing_config_factory = lambda connection: PairingConfig(sc=True, mitm=True, bonding=True,
                                                                             delegate=typed)
    await central.device.power_on()
    await dongle.start()

    def events(kind):
        return [e for e in read_jsonl(events_path) if e["event"] == kind]

    async def attempt(request):
        try:
            await request()
        except ProtocolError as error:
            return error.error_code
        return None

    link = await central.connect(address)
    await link.discover()
    cccd = link.tx.get_descriptor(GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR)
    server = dongle.device.gatt_server
    served = [a for a in server.attributes if dongle.tx.handle < a.handle <= dongle.tx.end_group_handle
              and a.type == GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR]
    check(cccd is not None and served == list(dongle.tx.descriptors), "TX's one CCC descriptor is the dongle's",
          str(served))
    errors = [await attempt(lambda: cccd.write_value(b"\x01\x00", with_response=True)),
              await attempt(lambda: link.rx.write_value(b"\x01", with_response=True))]
    check(errors == [ATT_INSUFFICIENT_ENCRYPTION_ERROR] * 2, "unencrypted CCC and RX writes refused with 0x0F",
          str(errors))
    await link.rx.write_value(b"\x02", with_response=False)
    await asyncio.sleep(0.2)
    check(not dongle.subscribed and not events("write"), "nothing subscribed or written unencrypted",
          json.dumps(read_jsonl(events_path)[-5:]))
    refused = events("att-refused")
    check(len(refused) == 3 and all(e["error"] == 0x0F for e in refused), "att-refused events", json.dumps(refused))

    typed.passkey = 654321  # a wrong passkey first
    try:
        await asyncio.wait_for(link.connection.pair(), 5)
        wrong = "paired"
    except Exception as error:  # bumble's ProtocolError (SMP Confirm Value Failed)
        wrong = type(error).__name__
    check(wrong != "paired" and events("pairing-failed"), "a wrong passkey fails", wrong)
    # Again on a new link (Bumble's central does not pair twice on one).
    await link.connection.disconnect()
    await link.wait_closed(2)
    typed.passkey = passkey
    link = await central.connect(address)
    await link.discover()
    await asyncio.wait_for(link.connection.pair(), 5)
    check(await eventually(lambda: events("paired"), 1), "paired event")
    paired, shown = events("paired")[-1], events("passkey-displayed")
    check(paired["authenticated"] and paired["sc"], "an authenticated Secure Connections key", json.dumps(paired))
    check(shown and shown[-1]["passkey"] == f"{passkey:06d}", "the passkey displayed", json.dumps(shown))
    await link.tx.subscribe(central.on_notification)
    await link.rx.write_value(b"\x03", with_response=True)
    check(await eventually(lambda: dongle.subscribed and events("write"), 1), "subscribed and written once encrypted")
    status = await control.reply("status")
    check(status["pairing"] == "passkey" and len(status["bonds"]) == 1, "status names the bond", json.dumps(status))
    await link.connection.disconnect()
    await link.wait_closed(2)

    # The next link: encrypted with the key both kept.
    link = await central.connect(address)
    await asyncio.wait_for(link.connection.encrypt(), 5)
    check(link.connection.encryption and events("ltk-request"), "the bond encrypts the next link")
    reply = await control.reply("forget-keys")
    check(reply["ok"] and len(reply["forgotten"]) == 1 and events("keys-forgotten"), "forget-keys", json.dumps(reply))
    await link.connection.disconnect()
    await link.wait_closed(2)

    # The dongle forgot: the central's key gets a negative reply, 0x06.
    link = await central.connect(address)
    try:
        await asyncio.wait_for(link.connection.encrypt(), 5)
        status = "encrypted"
    except hci.HCI_Error as error:
        status = error.error_code
    check(status == hci.HCI_ErrorCode.PIN_OR_KEY_MISSING_ERROR and events("ltk-request-negative"),
          "a forgotten bond: PIN or Key Missing", str(status))
    await link.connection.disconnect()
    await link.wait_closed(2)
    await dongle.close()
    passed("--pairing passkey: unencrypted CCC and RX writes refused with 0x0F (write without response dropped), "
           "a wrong passkey fails, the right one pairs (authenticated, SC); the bond encrypts the next link; "
           "after forget-keys the central's key gets PIN or Key Missing (0x06)")


async def readvertise_run(work):
    """`--readvertise-every`: while advertising with no link the dongle
    enables its advertising set again on that period (btvirt reports an
    advertiser to a scanner only when one of them starts); a central still
    connects and reads, and with a link the set is left alone."""
    air = FaithfulLink()
    central = Central(device_on(air, "readvertise-central"))
    settings = dataclasses.replace(SETTINGS, sleep_after=30.0, advertise_for=30.0, readvertise_every=0.1)
    dongle = firmware.Dongle(device_on(air, "readvertise-dongle", DONGLE_ADDRESS), settings,
                             firmware.JsonLines(None), firmware.JsonLines(None))
    address = hci.Address(DONGLE_ADDRESS, hci.Address.PUBLIC_DEVICE_ADDRESS)
    await central.device.power_on()
    await dongle.start()
    advertising_set = dongle.device.legacy_advertising_set
    check(advertising_set is not None and advertising_set.enabled, "advertising after start")
    starts = []
    advertising_set.on(advertising_set.EVENT_START, lambda: starts.append(time.monotonic()))
    await asyncio.sleep(1.05)
    # Ten on time; fewer (not none) when this machine is loaded.
    check(5 <= len(starts) <= 11, "the set enabled again every 0.1 s while advertising", f"{len(starts)} in 1.05 s")
    link = await central.open(address)
    await asyncio.sleep(0.5)
    check(len(central.received) > 0, "notifications after connecting to a re-advertising dongle")
    connected_at = len(starts)
    await asyncio.sleep(0.5)
    check(len(starts) == connected_at and dongle.state is firmware.State.CONNECTED,
          "the set left alone while connected", f"{len(starts) - connected_at} enables, state {dongle.state}")
    await central.close(link)
    await dongle.close()
    passed(f"--readvertise-every 0.1: the set enabled {connected_at} times before a central connected, none "
           "while connected; the central reads")


def argparse_namespace(**values):
    import argparse
    return argparse.Namespace(**values)


async def main():
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dongle-selftest-") as work:
        try:
            rig = InProcess(work)
            await rig.run()
            await subprocess_run(work, rig.air, rig.central)
            await pairing_run(work)
            await readvertise_run(work)
            await usb_bridge_run(work)
        except Failure as failure:
            print(f"FAIL {failure}", flush=True)
            return 1
        except (Exception, asyncio.CancelledError):  # a GATT request cut by a disconnect ends cancelled
            print("FAIL with an exception:", flush=True)
            traceback.print_exc()
            with contextlib.suppress(FileNotFoundError), open(os.path.join(work, "events.jsonl")) as events:
                print("the last events:\n" + "".join(events.readlines()[-30:]), file=sys.stderr)
            return 1
    print(f"all passed in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
