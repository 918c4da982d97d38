#!/usr/bin/env python3
"""A Nordic-style BLE telemetry dongle for Tether's end-to-end tests.

Bumble runs the host stack in this process and drives a controller through
any Bumble transport; in the e2e guest that is `hci-socket:1`, an HCI user
channel on btvirt's hci1, so the kernel and bluetoothd keep off it.

The firmware it imitates:

- GATT: the Nordic UART Service. RX 6e400002 (write, write without response;
  central to dongle), TX 6e400003 (notify, with its CCC descriptor).
- Telemetry: while a central has notifications on TX enabled, `--rate`
  notifications a second of 8 bytes, the same as Tether's simulator: UInt32 LE
  sequence number (from 1, never reused in a run), Int16 LE temperature in
  0.01 degC, UInt16 LE humidity in 0.01 %.
- Sleep: a connected central that neither writes RX nor reads anything for
  `--sleep-after` seconds is dropped and the dongle falls ASLEEP: no
  advertising until woken. After any other disconnect it advertises for
  `--advertise-for` seconds, then falls asleep too.
- Faults the firmware can have: a hung application (`hang`: the BLE stack
  keeps the link and answers ATT, telemetry stops, nothing sleeps), and a
  GATT layout that changes (`gatt extra|base`: a service inserted before NUS
  or taken out, announced with a Service Changed indication while connected,
  or across a reboot with `drop`).
- Pairing (`--pairing`, off by default): with `just-works` or
  `passkey:NNNNNN` the CCC descriptor of TX and writes of RX need an
  encrypted link (ATT error 0x0F before; a write without response is
  dropped), Secure Connections with bonding, the passkey shown by a
  display-only dongle. Keys live as long as the process (a MemoryKeyStore);
  `forget-keys` forgets them, as a factory reset does.
- A control socket (`--control`) for the tests: one command per line, one
  JSON reply line each (see Control.HELP and the README).

Every notification sent is a line in `--sent-log`, every event a line in
`--event-log`; both are JSON lines flushed one by one.
"""

import argparse
import asyncio
import dataclasses
import enum
import functools
import json
import logging
import math
import os
import signal
import struct
import sys
import time

from bumble.att import ATT_Error, Attribute, ErrorCode
from bumble.core import UUID, AdvertisingData
from bumble.device import AdvertisingType, Device
from bumble.gatt import (GATT_BATTERY_LEVEL_CHARACTERISTIC, GATT_BATTERY_SERVICE,
                         GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR, Characteristic,
                         CharacteristicValue, Descriptor, Service)
from bumble.hci import Address, HCI_Error, HCI_LE_Set_Random_Address_Command, OwnAddressType
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport

NUS_SERVICE = UUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")
NUS_RX = UUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")
NUS_TX = UUID("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")
NORDIC_COMPANY_ID = 0x0059
DFU_SERVICE_16 = 0xFE59  # Nordic's Secure DFU service, what its bootloader advertises

# Remote User Terminated Connection: what the firmware puts in its own
# disconnects (idle sleep, `disconnect`, refused connections). 0x0D is not
# among the reasons HCI_Disconnect accepts (Core Vol 4 Part E 7.1.6).
REASON_TERMINATED = 0x13

# The GATT layouts `gatt LAYOUT` switches between: "extra" inserts a Battery
# Service between the GATT service and NUS, so NUS and everything after it
# move to other handles (as a firmware update adding a service does).
LAYOUTS = ("base", "extra")

ADVERTISING_INTERVAL_MS = 100  # a connectable Nordic default; quick to find
DRAIN_TIMEOUT_S = 1.0  # notifications already handed to the controller
DISCONNECT_TIMEOUT_S = 3.0  # a controller that never confirms a disconnect
MAX_NAME_BYTES = 29  # a scan response is 31 bytes: 2 for the AD header


def telemetry_payload(seq):
    """The simulator's notification for `seq` (SimulatedDongle.nextNotification)."""
    phase = (seq % 3600) / 3600 * 2 * math.pi
    temperature = int(2150 + 150 * math.sin(phase))
    humidity = int(4500 + 500 * math.cos(phase))
    return struct.pack("<IhH", seq & 0xFFFFFFFF, temperature, humidity)


READ_PERMISSIONS = (Attribute.READABLE | Attribute.READ_REQUIRES_ENCRYPTION | Attribute.READ_REQUIRES_AUTHENTICATION
                    | Attribute.READ_REQUIRES_AUTHORIZATION)
WRITE_PERMISSIONS = (Attribute.WRITEABLE | Attribute.WRITE_REQUIRES_ENCRYPTION
                     | Attribute.WRITE_REQUIRES_AUTHENTICATION | Attribute.WRITE_REQUIRES_AUTHORIZATION)


# What Bumble's own checks raise on an unencrypted or unpaired link
# (Attribute.read_value / write_value): logged as `att-refused`.
SECURITY_ERRORS = (ErrorCode.INSUFFICIENT_ENCRYPTION, ErrorCode.INSUFFICIENT_AUTHENTICATION)


def enforce_permissions(attribute, refused=None):
    """Answer as a real GATT server does where Bumble 0.0.236 does not: a read
    of an attribute without read permission gets Read Not Permitted (Bumble
    raises inside the request and never answers, which stalls the central's
    ATT queue until its 30 s timeout), and a write of one without write
    permission gets Write Not Permitted (Bumble overwrites the value, even a
    characteristic declaration's). bluetoothd does both with a stale cache
    after the layout changed. Bumble's own encryption and authentication
    checks pass through; `refused(attribute, bearer, operation, code)` hears
    of each they refuse."""
    read, write = attribute.read_value, attribute.write_value

    def report(bearer, operation, error):
        if refused is not None and error.error_code in SECURITY_ERRORS:
            refused(attribute, bearer, operation, error.error_code)

    async def read_value(bearer):
        if not attribute.permissions & READ_PERMISSIONS:
            raise ATT_Error(ErrorCode.READ_NOT_PERMITTED, attribute.handle)
        try:
            return await read(bearer)
        except ATT_Error as error:
            report(bearer, "read", error)
            raise

    async def write_value(bearer, value):
        if not attribute.permissions & WRITE_PERMISSIONS:
            raise ATT_Error(ErrorCode.WRITE_NOT_PERMITTED, attribute.handle)
        try:
            return await write(bearer, value)
        except ATT_Error as error:
            report(bearer, "write", error)
            raise

    attribute.read_value, attribute.write_value = read_value, write_value


def address_text(address):
    return address.to_string(with_type_qualifier=False)


class JsonLines:
    """An append-only JSON-lines file, flushed per line so a crash loses nothing.
    Without a path it discards."""

    def __init__(self, path):
        self.file = open(path, "a", buffering=1, encoding="utf-8") if path else None

    def write(self, **record):
        if self.file is not None:
            self.file.write(json.dumps({"t": time.monotonic(), **record}) + "\n")
            self.file.flush()

    def close(self):
        if self.file is not None:
            self.file.close()


@dataclasses.dataclass
class Settings:
    name: str = "Tether-E2E"
    sleep_after: float = 8.0
    advertise_for: float = 180.0
    rate: float = 10.0
    first_seq: int = 1  # a dongle started again continues its numbering
    pairing: str = "none"  # none | just-works | passkey (then `passkey` is the number it shows)
    passkey: int = 0
    readvertise_every: float = 0.0  # seconds; 0: never (see Dongle.keep_advertising_seen)


PAIRING_MODES = ("none", "just-works", "passkey:NNNNNN")


def parse_pairing(text):
    """`--pairing`: (mode, passkey) from none | just-works | passkey:NNNNNN."""
    if text in ("none", "just-works"):
        return text, 0
    kind, _, digits = text.partition(":")
    if kind == "passkey" and len(digits) == 6 and digits.isdigit():
        return "passkey", int(digits)
    raise ValueError(f"--pairing: {' | '.join(PAIRING_MODES)}, got {text!r}")


class DongleDelegate(PairingDelegate):
    """The dongle's side of pairing: no input and no output (Just Works), or
    a display that shows the fixed passkey (the central types it)."""

    def __init__(self, dongle, passkey=None):
        super().__init__(PairingDelegate.IoCapability.NO_OUTPUT_NO_INPUT if passkey is None
                         else PairingDelegate.IoCapability.DISPLAY_OUTPUT_ONLY)
        self.dongle, self.passkey = dongle, passkey

    async def generate_passkey(self):
        return self.passkey

    async def display_number(self, number, digits):
        self.dongle.events.write(event="passkey-displayed", passkey=f"{number:0{digits}d}")


class State(enum.Enum):
    ADVERTISING = "advertising"
    CONNECTED = "connected"
    ASLEEP = "asleep"


class CommandError(Exception):
    """A control command that cannot run; answered, never fatal."""


class Dongle:
    """The firmware: GATT service, telemetry, and the advertise/connect/sleep
    state machine, over one Bumble Device (any controller behind it).

    Every transition that sends HCI commands runs under `self.lock`, so control
    commands, timers and link events never interleave halfway. Bumble's
    callbacks (connection, disconnection, GATT) are synchronous: they record
    what happened and leave the follow-up to a task that takes the lock.
    """

    def __init__(self, device, settings, sent_log=None, events=None):
        self.device = device
        self.settings = settings
        self.rate = settings.rate
        self.sent_log = sent_log or JsonLines(None)
        self.events = events or JsonLines(None)
        self.lock = asyncio.Lock()
        self.state = State.ASLEEP  # until start() advertises
        self.connection = None
        self.closing_link = False  # the firmware is dropping the link: telemetry stops
        self.subscribed = False
        self.seq = settings.first_seq - 1
        self.connections = 0
        self.refused = 0
        self.sleeps = 0
        self.last_activity = None
        self.advertising_until = 0.0
        self.refuse_until = 0.0
        self.refuse_silent = False
        self.advertising_connectable = True
        self.deadline = None  # the idle deadline when connected, the advertising one otherwise
        self.refuse_timer = None
        self.telemetry_task = None
        self.tasks = set()
        self.hung = False  # the application is stuck; the BLE stack is not
        self.hangs = 0
        self.layout = "base"
        self.identity = None  # None: the controller's public address; else the random one advertised
        self.bootloader_address = None  # while Nordic's DFU bootloader runs instead of the application
        self.layout_changes = 0
        self.pairing = settings.pairing
        secure = self.pairing != "none"

        self.rx = Characteristic(
            NUS_RX,
            Characteristic.Properties.WRITE | Characteristic.Properties.WRITE_WITHOUT_RESPONSE,
            Attribute.WRITEABLE | (Attribute.WRITE_REQUIRES_ENCRYPTION if secure else 0),
            CharacteristicValue(write=self.on_rx_write),
        )
        self.tx = Characteristic(NUS_TX, Characteristic.Properties.NOTIFY, Attribute.READABLE, b"")
        if secure:
            # Bumble adds a CCC descriptor that anyone may write unless the
            # characteristic has one: this one needs an encrypted link, so
            # enabling notifications makes the central pair (or encrypt).
            self.tx.descriptors = [Descriptor(
                GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR,
                Attribute.READABLE | Attribute.WRITEABLE | Attribute.WRITE_REQUIRES_ENCRYPTION,
                device.gatt_server.make_descriptor_value(self.tx))]
            passkey = settings.passkey if self.pairing == "passkey" else None
            device.pairing_config_factory = lambda connection: PairingConfig(
                sc=True, mitm=passkey is not None, bonding=True, delegate=DongleDelegate(self, passkey))
            self.hook_long_term_key()
        self.nus = Service(NUS_SERVICE, [self.rx, self.tx])
        self.battery = Service(GATT_BATTERY_SERVICE, [Characteristic(
            GATT_BATTERY_LEVEL_CHARACTERISTIC, Characteristic.Properties.READ | Characteristic.Properties.NOTIFY,
            Attribute.READABLE, bytes([87]))])
        # Bumble's own services (GAP; GATT with Service Changed and Database
        # Hash) come first and never move.
        self.fixed_services = list(device.gatt_server.services)
        device.add_service(self.nus)
        self.hook_reads()
        self.tx.on("subscription", self.on_subscription)
        device.on("connection", self.on_connection)

    # ------------------------------------------------------------------ life

    async def start(self):
        await self.device.power_on()
        if self.device.public_address == Address.ANY:
            raise RuntimeError("the controller has no public address")
        async with self.lock:
            await self.advertise()
        self.telemetry_task = asyncio.create_task(self.run_telemetry())
        if self.settings.readvertise_every > 0:
            self.spawn(self.keep_advertising_seen())

    async def close(self):
        """Power off: telemetry stops, the link is dropped, advertising ends."""
        if self.telemetry_task is not None:
            self.telemetry_task.cancel()
        async with self.lock:
            self.cancel_deadline()
            self.state = State.ASLEEP
            await self.quiet()
            self.events.write(event="power-off")
        if self.refuse_timer is not None:
            self.refuse_timer.cancel()
        for task in list(self.tasks):
            task.cancel()

    @property
    def address(self):
        return address_text(self.device.public_address)

    @property
    def advertised_address(self):
        return self.address if self.identity is None else address_text(self.identity)

    # ----------------------------------------------------------- advertising

    def advertising_data(self):
        return bytes(AdvertisingData([
            (AdvertisingData.FLAGS, bytes([
                AdvertisingData.LE_GENERAL_DISCOVERABLE_MODE_FLAG | AdvertisingData.BR_EDR_NOT_SUPPORTED_FLAG])),
            (AdvertisingData.COMPLETE_LIST_OF_128_BIT_SERVICE_CLASS_UUIDS, bytes(NUS_SERVICE)),
            # 21 bytes so far; Nordic's company id still fits in the 31.
            (AdvertisingData.MANUFACTURER_SPECIFIC_DATA, struct.pack("<H", NORDIC_COMPANY_ID)),
        ]))

    def scan_response_data(self):
        return bytes(AdvertisingData([(AdvertisingData.COMPLETE_LOCAL_NAME, self.settings.name.encode())]))

    def refusing(self):
        return time.monotonic() < self.refuse_until

    async def advertise(self, restart_deadline=True):
        """Advertise (again): connectable, or only scannable while refusing
        silently. Under the lock."""
        self.state = State.ADVERTISING
        if restart_deadline:  # armed first: if the controller fails us, we still fall asleep
            self.advertising_until = time.monotonic() + self.settings.advertise_for
            self.arm_deadline(self.settings.advertise_for, self.on_advertising_deadline)
        connectable = not (self.refusing() and self.refuse_silent)
        self.advertising_connectable = connectable
        await self.stop_advertising()
        await self.device.start_advertising(
            advertising_type=AdvertisingType.UNDIRECTED_CONNECTABLE_SCANNABLE if connectable
            else AdvertisingType.UNDIRECTED_SCANNABLE,
            own_address_type=OwnAddressType.PUBLIC if self.identity is None else OwnAddressType.RANDOM,
            advertising_data=self.advertising_data(),
            scan_response_data=self.scan_response_data(),
            advertising_interval_min=ADVERTISING_INTERVAL_MS,
            advertising_interval_max=ADVERTISING_INTERVAL_MS,
        )
        self.events.write(event="advertising", connectable=connectable,
                          until=self.advertising_until)

    async def keep_advertising_seen(self):
        """A radio sends an advertising event every interval, and a scanner
        hears the next one whenever it starts. btvirt's emulated controllers
        (BlueZ's btdev) send a scanner one report when its scan is enabled and
        one each time an advertiser enables its set, nothing in between. The
        first comes in the same batch as the scan's Command Complete, and the
        kernel drops a report that it handles before its discovery state is
        FINDING (mgmt_device_found: "not a kernel-initiated discovery"), so
        bluetoothd then saw the dongle only at a later scan, 10.24 s apart,
        once 84 s into a search. Enabling the set again every
        `readvertise_every` seconds gives scanners the reports a real
        dongle's next advertising events would. Only while advertising with
        no link; the set is off between the two commands for one HCI round
        trip (a connection asked for in that moment waits, as for an
        advertiser out of range)."""
        while True:
            await asyncio.sleep(self.settings.readvertise_every)
            async with self.lock:
                advertising_set = self.device.legacy_advertising_set
                if (self.state is not State.ADVERTISING or self.connection is not None
                        or advertising_set is None or not advertising_set.enabled):
                    continue
                try:
                    await advertising_set.stop()
                    # A connection cannot arrive while the set is off; one that
                    # came first made the stop fail (btdev: Command Disallowed).
                    await advertising_set.start()
                except HCI_Error as error:
                    # A connection raced the stop: the set ended with it, and
                    # the next advertise() forgets it (stop_advertising).
                    self.events.write(event="readvertise-raced", error=str(error))

    async def on_advertising_deadline(self):
        async with self.lock:
            if (self.state is State.ADVERTISING and time.monotonic() >= self.advertising_until
                    and not self.hung):  # the stuck application never gets to power off
                await self.fall_asleep("advertise-timeout")

    async def fall_asleep(self, cause):
        """System OFF until `wake`. Under the lock."""
        self.state = State.ASLEEP  # first, so a connection arriving meanwhile is refused
        self.cancel_deadline()
        self.sleeps += 1
        await self.quiet()
        self.events.write(event="sleep", cause=cause)

    async def stop_advertising(self):
        """A connection ends the advertising set in the controller, but Bumble
        can still hold it as enabled (when the connection raced a restart of
        advertising); btvirt then refuses to disable or re-enable it with
        Command Disallowed, seen in the e2e guest. The set is gone either way:
        forget it, so the next start creates a fresh one."""
        try:
            await self.device.stop_advertising()
        except HCI_Error as error:
            self.events.write(event="stale-advertising-set", error=str(error))
            stale, self.device.legacy_advertising_set = self.device.legacy_advertising_set, None
            if stale is not None:
                try:
                    await stale.remove()
                except HCI_Error:
                    pass

    async def quiet(self):
        """No advertising and no link. Under the lock."""
        await self.stop_advertising()
        if self.connection is not None:
            await self.drop_link()

    async def wake(self):
        async with self.lock:
            if self.state is not State.ASLEEP:
                return False
            self.events.write(event="wake")
            await self.advertise()
            return True

    # ------------------------------------------------------------ the link

    def on_connection(self, connection):
        if self.state is not State.ADVERTISING or self.connection is not None or self.refusing():
            self.refuse(connection)
            return
        self.connection = connection
        self.state = State.CONNECTED
        self.connections += 1
        self.events.write(event="connected", peer=address_text(connection.peer_address),
                          peer_type=connection.peer_address.address_type)
        connection.on("disconnection", functools.partial(self.on_disconnection, connection))
        if self.pairing != "none":
            self.watch_security(connection)
        self.note_activity()

    def on_disconnection(self, connection, reason):
        if connection is not self.connection:
            return
        by_dongle = self.closing_link
        self.connection = None
        self.subscribed = False
        self.events.write(event="disconnected", reason=reason, by="dongle" if by_dongle else "central")
        # The central went away or the link was lost; unless the dongle was
        # already on its way to sleep, it advertises again.
        if not by_dongle and self.state is State.CONNECTED:
            self.cancel_deadline()
            self.state = State.ADVERTISING
            self.spawn(self.readvertise_after_drop())

    async def readvertise_after_drop(self):
        async with self.lock:
            if self.state is State.ADVERTISING:  # not put to sleep meanwhile
                await self.advertise()

    async def drop_link(self, reason=REASON_TERMINATED):
        """The firmware's own disconnect. Telemetry stops first and what was
        already handed to the controller drains, so nothing is in flight when
        the link goes. Under the lock."""
        connection = self.connection
        self.closing_link = True
        try:
            await asyncio.wait_for(connection.drain(), DRAIN_TIMEOUT_S)
        except asyncio.TimeoutError:
            self.events.write(event="error", during="drain", error="timed out")
        try:
            await asyncio.wait_for(connection.disconnect(reason), DISCONNECT_TIMEOUT_S)
        except Exception as error:  # the link may be gone already; the controller may not answer
            self.events.write(event="error", during="disconnect", error=repr(error))
        finally:
            if self.connection is connection:  # no disconnection event came: forget it anyway
                self.on_disconnection(connection, None)
            self.closing_link = False

    def refuse(self, connection):
        """Drop an incoming connection at once; advertise again if awake."""
        self.refused += 1
        self.events.write(event="refused", peer=address_text(connection.peer_address),
                          reason=REASON_TERMINATED, state=self.state.value)
        self.spawn(self.finish_refusal(connection))

    async def finish_refusal(self, connection):
        try:
            await asyncio.wait_for(connection.disconnect(REASON_TERMINATED), DISCONNECT_TIMEOUT_S)
        except Exception as error:  # the central may have gone first
            self.events.write(event="error", during="refuse", error=repr(error))
        async with self.lock:
            if self.state is State.ADVERTISING and self.connection is None:
                await self.advertise()  # as after any disconnect

    async def disconnect(self, reason=REASON_TERMINATED):
        async with self.lock:
            if self.connection is None:
                raise CommandError(f"not connected ({self.state.value})")
            await self.drop_link(reason)
            await self.advertise()  # as after any unexpected drop

    # ------------------------------------------------------ application faults

    async def hang(self):
        """The application stops (a Nordic part whose SoftDevice keeps the
        link while the application is stuck): no telemetry, no idle sleep, no
        advertising timeout; the BLE stack still accepts connections, answers
        ATT requests and takes writes."""
        async with self.lock:
            if self.hung:
                return False
            self.hung = True
            self.hangs += 1
            if self.state is State.CONNECTED:
                self.cancel_deadline()  # the idle timer is the application's
            self.events.write(event="hang", state=self.state.value)
            return True

    async def resume(self):
        """The application runs again: telemetry resumes where it stopped
        (no sequence number skipped), the idle and advertising deadlines
        are armed afresh."""
        async with self.lock:
            if not self.hung:
                return False
            self.hung = False
            self.events.write(event="resume", state=self.state.value)
            if self.state is State.CONNECTED:
                self.note_activity()
            elif self.state is State.ADVERTISING:
                self.advertising_until = time.monotonic() + self.settings.advertise_for
                self.arm_deadline(self.settings.advertise_for, self.on_advertising_deadline)
            return True

    async def change_identity(self, kind, text):
        """`address public` | `address random [ADDRESS]`: the dongle comes back
        (the link, if any, dropped as by a reboot) advertising another
        identity: its public address, or a random one (by default the
        public address with the two top bits set: a static random address).
        bluetoothd's object for the old identity stays behind."""
        async with self.lock:
            if kind == "public" and text is None:
                identity = None
            elif kind == "random":
                if text is None:
                    raw = bytearray(bytes(self.device.public_address))  # little-endian
                    raw[5] |= 0xC0
                    identity = Address(bytes(raw), Address.RANDOM_DEVICE_ADDRESS)
                else:
                    try:
                        identity = Address(text, Address.RANDOM_DEVICE_ADDRESS)
                    except (ValueError, TypeError):
                        raise CommandError(f"address: not an address: {text!r}") from None
            else:
                raise CommandError("address: public | random [AA:BB:CC:DD:EE:FF]")
            dropped = self.connection is not None
            if dropped:
                await self.drop_link()
            self.identity = identity
            if identity is not None:
                await self.stop_advertising()
                await self.use_random_address(identity)
            self.events.write(event="identity", address=self.advertised_address,
                              address_type="public" if identity is None else "random", dropped=dropped)
            if self.state is not State.ASLEEP:
                await self.advertise()
            return {"address": self.advertised_address, "address_type": "public" if identity is None else "random",
                    "dropped": dropped}

    async def use_random_address(self, address):
        """The controller's own random address, not only the advertising
        set's: Bumble's emulated link finds an advertiser by it. btvirt finds
        it by the set's and refuses this legacy command (Command Disallowed)
        once extended advertising commands were used. Under the lock."""
        try:
            await self.device.send_command(HCI_LE_Set_Random_Address_Command(random_address=address),
                                           check_result=True)
        except HCI_Error as error:
            self.events.write(event="random-address-refused", error=str(error))
        self.device.random_address = address

    async def bootloader(self, on):
        """`bootloader on`: the firmware reboots into Nordic's DFU bootloader
        (a firmware update): the link, if any, drops; the application stops
        (asleep, so a connection is refused and logged); `DfuTarg` advertises,
        connectable, with the DFU service (0xFE59), at the address with its
        last octet plus one as a random address (nRF5 SDK nrf_dfu_ble:
        addr[0] += 1). `bootloader off`: the updated application starts and
        advertises at its own address."""
        async with self.lock:
            if on == (self.bootloader_address is not None):
                return {"bootloader": self.bootloader_address}
            if on:
                # The application stops, but this is no sleep (the sleep
                # count and causes are the keep-alive's verdict).
                self.state = State.ASLEEP  # first, so a connection arriving meanwhile is refused
                self.cancel_deadline()
                await self.quiet()
                raw = bytearray(bytes(self.device.public_address if self.identity is None else self.identity))
                raw[0] = (raw[0] + 1) & 0xFF  # little-endian: the text's last octet
                address = Address(bytes(raw), Address.RANDOM_DEVICE_ADDRESS)
                await self.use_random_address(address)
                self.bootloader_address = address_text(address)
                await self.device.start_advertising(
                    advertising_type=AdvertisingType.UNDIRECTED_CONNECTABLE_SCANNABLE,
                    own_address_type=OwnAddressType.RANDOM,
                    advertising_data=bytes(AdvertisingData([
                        (AdvertisingData.FLAGS, bytes([
                            AdvertisingData.LE_GENERAL_DISCOVERABLE_MODE_FLAG
                            | AdvertisingData.BR_EDR_NOT_SUPPORTED_FLAG])),
                        (AdvertisingData.COMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS,
                         struct.pack("<H", DFU_SERVICE_16))])),
                    scan_response_data=bytes(AdvertisingData([(AdvertisingData.COMPLETE_LOCAL_NAME, b"DfuTarg")])),
                    advertising_interval_min=ADVERTISING_INTERVAL_MS,
                    advertising_interval_max=ADVERTISING_INTERVAL_MS,
                )
                self.events.write(event="bootloader", on=True, address=self.bootloader_address)
                return {"bootloader": self.bootloader_address}
            await self.stop_advertising()
            self.bootloader_address = None
            if self.identity is not None:
                await self.use_random_address(self.identity)
            self.events.write(event="bootloader", on=False)
            await self.advertise()
            return {"bootloader": None}

    # ---------------------------------------------------------- GATT layout

    def hook_reads(self):
        """Any successful ATT read of any attribute (GAP name, CCC, discovery)
        is activity; permissions are enforced (enforce_permissions);
        attributes made by a new layout get both too."""
        for attribute in self.device.gatt_server.attributes:
            if not getattr(attribute, "e2e_read_hooked", False):
                attribute.e2e_read_hooked = True
                attribute.on("read", functools.partial(self.on_read, attribute))
                enforce_permissions(attribute, self.on_refused)

    def rebuild_gatt(self, layout):
        """The GATT database anew with `layout`; returns the first handle
        that changed. Synchronous, so no notification goes out halfway."""
        server = self.device.gatt_server
        before = [(a.handle, a.type, bytes(a.value) if isinstance(a.value, bytes) else None)
                  for a in server.attributes]
        server.attributes = []
        server.attributes_by_handle = {}
        server.services = []
        services = self.fixed_services + ([self.battery] if layout == "extra" else []) + [self.nus]
        for service in services:
            server.add_service(service)
        after = [(a.handle, a.type, bytes(a.value) if isinstance(a.value, bytes) else None)
                 for a in server.attributes]
        changed = next((i + 1 for i, (a, b) in enumerate(zip(before, after)) if a != b),
                       min(len(before), len(after)) + 1)
        # CCC values live by handle: those at or past the change belong to
        # attributes that moved or went (the client subscribes again).
        for cccds in server.subscribers.values():
            for handle in [h for h in cccds if h >= changed]:
                del cccds[handle]
        self.layout = layout
        self.layout_changes += 1
        self.hook_reads()
        return changed

    async def change_layout(self, layout, drop):
        """`gatt LAYOUT [drop]`. Connected: the database changes under the
        link and the central is told with a Service Changed indication for
        the handles from the first changed one to 0xFFFF (when it enabled
        them); with `drop`, the link goes first (a firmware update's reboot)
        and the dongle advertises the new layout. Under the lock."""
        async with self.lock:
            if layout not in LAYOUTS:
                raise CommandError(f"gatt: unknown layout {layout!r} ({' | '.join(LAYOUTS)})")
            old_tx = self.tx.handle
            dropped = False
            if drop and self.connection is not None:
                await self.drop_link()
                dropped = True
            changed = self.rebuild_gatt(layout)
            reply = {"layout": layout, "first_changed_handle": changed, "tx_handle_before": old_tx,
                     "tx_handle": self.tx.handle, "dropped": dropped, "indicated": False}
            connection = self.connection
            if connection is not None:
                service_changed = self.device.gatt_service.service_changed_characteristic
                if self.device.gatt_server.read_cccd(connection, service_changed)[0] & 0x02:
                    value = struct.pack("<HH", changed, 0xFFFF)
                    try:
                        await asyncio.wait_for(
                            self.device.gatt_server.indicate_subscriber(connection, service_changed, value), 10)
                        reply["indicated"] = True
                    except Exception as error:  # the link may go meanwhile; say so
                        reply["indication_error"] = repr(error)
            self.events.write(event="gatt-layout", **reply)
            if dropped:
                await self.advertise()
            return reply

    async def sleep(self):
        async with self.lock:
            if self.state is State.ASLEEP:
                return False
            await self.fall_asleep("command")
            return True

    async def start_refusing(self, seconds, silent):
        async with self.lock:
            self.refuse_until = time.monotonic() + seconds
            self.refuse_silent = silent
            if self.refuse_timer is not None:
                self.refuse_timer.cancel()
            if seconds > 0:
                self.events.write(event="refuse-start", seconds=seconds, silent=silent)
                self.refuse_timer = asyncio.get_running_loop().call_later(
                    seconds, lambda: self.spawn(self.stop_refusing()))
            else:
                self.events.write(event="refuse-end")
            await self.match_refusal()

    async def stop_refusing(self):
        async with self.lock:
            self.refuse_timer = None
            self.events.write(event="refuse-end")
            await self.match_refusal()

    async def match_refusal(self):
        """Silent refusal advertises scannable only: re-advertise when that
        changes. Under the lock."""
        connectable = not (self.refusing() and self.refuse_silent)
        if (self.state is State.ADVERTISING and self.connection is None
                and connectable != self.advertising_connectable):
            await self.advertise(restart_deadline=False)

    # ------------------------------------------------------------- security

    def hook_long_term_key(self):
        """The central starts encryption with the key it kept: Bumble's host
        asks the device for it (its keystore) and answers the controller with
        the key or a negative reply (then the central's controller reports
        PIN or Key Missing, 0x06). Each answer is an event."""
        host = self.device.host
        provider = host.long_term_key_provider

        async def long_term_key(handle, rand, ediv):
            key = await provider(handle, rand, ediv)
            self.events.write(event="ltk-request" if key else "ltk-request-negative", handle=handle)
            return key

        host.long_term_key_provider = long_term_key

    def watch_security(self, connection):
        """Pairing and encryption on this link, as events."""
        def paired(keys):
            # Bumble keeps the keys whether or not the central asked to bond;
            # a key of Just Works is unauthenticated, of a passkey authenticated.
            ltk = keys.ltk or keys.ltk_peripheral  # Secure Connections' key, or a legacy one
            self.events.write(event="paired", peer=address_text(connection.peer_address),
                              authenticated=bool(ltk and ltk.authenticated), sc=bool(connection.sc))

        def failed(reason):
            self.events.write(event="pairing-failed", reason=int(reason), reason_name=getattr(reason, "name", None))

        def encryption():
            self.events.write(event="encrypted", encryption=connection.encryption,
                              key_size=connection.encryption_key_size)

        def encryption_failed(error):
            self.events.write(event="encryption-failed", error=str(error))

        connection.on("pairing_start", lambda: self.events.write(event="pairing-started"))
        connection.on("pairing", paired)
        connection.on("pairing_failure", failed)
        connection.on("connection_encryption_change", encryption)
        connection.on("connection_encryption_failure", encryption_failed)

    def on_refused(self, attribute, bearer, operation, code):
        self.events.write(event="att-refused", handle=attribute.handle, operation=operation, error=int(code),
                          current=bearer is self.connection or getattr(bearer, "connection", None) is self.connection)

    async def forget_keys(self):
        """A factory reset of the bonds: every key the dongle holds goes
        (the link, if any, stays as it is; the next one needs pairing)."""
        keystore = self.device.keystore
        peers = [name for name, _ in await keystore.get_all()] if keystore is not None else []
        if keystore is not None:
            await keystore.delete_all()
            await self.device.refresh_resolving_list()
        self.events.write(event="keys-forgotten", peers=peers)
        return {"forgotten": peers}

    async def bonds(self):
        keystore = self.device.keystore
        return [name for name, _ in await keystore.get_all()] if keystore is not None else []

    # --------------------------------------------------------- GATT traffic

    def on_rx_write(self, connection, value):
        if connection is self.connection:
            self.events.write(event="write", hex=bytes(value).hex())
            self.note_activity()

    def on_read(self, attribute, connection, _value):
        if connection is self.connection:
            self.events.write(event="read", handle=attribute.handle)
            self.note_activity()

    def on_subscription(self, connection, notify_enabled, _indicate_enabled):
        if connection is not self.connection:  # a CCC write from a link already gone
            return
        self.subscribed = bool(notify_enabled)
        self.events.write(event="subscribed" if self.subscribed else "unsubscribed")

    def note_activity(self):
        self.last_activity = time.monotonic()
        # Not while the link goes; not while hung (the idle timer is the
        # application's, and the application is stuck).
        if self.state is State.CONNECTED and not self.closing_link and not self.hung:
            self.arm_deadline(self.settings.sleep_after, self.on_idle_deadline)

    async def on_idle_deadline(self):
        async with self.lock:
            if (self.state is State.CONNECTED and self.connection is not None and not self.hung
                    and time.monotonic() - self.last_activity >= self.settings.sleep_after):
                await self.fall_asleep("idle")

    # ------------------------------------------------------------ telemetry

    def notifications_enabled(self, connection):
        """What Bumble will deliver to: its own CCC state, not our event log."""
        return self.device.gatt_server.read_cccd(connection, self.tx)[0] & 0x01 != 0

    async def run_telemetry(self):
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            if self.rate <= 0:
                await asyncio.sleep(0.1)
                next_at = loop.time()
                continue
            next_at = max(next_at + 1 / self.rate, loop.time())  # when late, no burst to catch up
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            try:
                await self.notify_once()
            except Exception as error:  # a bug here must not end telemetry for the run
                self.events.write(event="error", during="telemetry", error=repr(error))

    async def notify_once(self):
        connection = self.connection
        if (self.state is not State.CONNECTED or connection is None or self.closing_link or self.hung
                or not self.notifications_enabled(connection)):
            return
        seq = self.seq + 1
        payload = telemetry_payload(seq)
        # With a value given, Bumble hands the PDU to the host without awaiting
        # anything, so the checks above still hold when it goes out.
        await self.device.notify_subscriber(connection, self.tx, payload)
        self.seq = seq
        self.sent_log.write(seq=seq, hex=payload.hex())

    # -------------------------------------------------------------- helpers

    def arm_deadline(self, seconds, action):
        self.cancel_deadline()
        self.deadline = asyncio.get_running_loop().call_later(seconds, lambda: self.spawn(action()))

    def cancel_deadline(self):
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def spawn(self, coroutine):
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.task_done)

    def task_done(self, task):
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.events.write(event="error", during="task", error=repr(task.exception()))

    def status(self):
        now = time.monotonic()
        return {
            "state": self.state.value,
            "address": self.address,
            "address_type": "public" if self.identity is None else "random",
            "public_address": self.address,
            "advertised_address": self.advertised_address,
            "seq": self.seq,
            "connections": self.connections,
            "refused": self.refused,
            "sleeps": self.sleeps,
            "subscribed": self.subscribed,
            "rate": self.rate,
            "idle_for": now - self.last_activity if self.connection is not None else None,
            "refusing_for": max(0.0, self.refuse_until - now),
            "hung": self.hung,
            "layout": self.layout,
            "tx_handle": self.tx.handle,
        }


class Control:
    """The control protocol: one command per line in, one JSON line out."""

    HELP = ("status | wake | sleep | disconnect [REASON] | refuse SECONDS [silent] | rate N | hang | resume"
            " | gatt base|extra [drop] | address public|random [ADDRESS] | bootloader on|off | forget-keys | quit")

    def __init__(self, dongle):
        self.dongle = dongle
        self.quit = asyncio.Event()

    async def reply(self, line):
        try:
            return {"ok": True, **await self.run(line)}
        except CommandError as error:
            return {"ok": False, "error": str(error)}
        except Exception as error:  # a failing command is answered, never fatal
            return {"ok": False, "error": f"{type(error).__name__}: {error}"}

    async def run(self, line):
        words = line.split()
        if not words:
            raise CommandError(f"empty command; commands: {self.HELP}")
        self.dongle.events.write(event="control", command=line)
        name, arguments = words[0].lower(), words[1:]
        dongle = self.dongle
        if name == "status" and not arguments:
            if dongle.pairing == "none":
                return dongle.status()
            return {**dongle.status(), "pairing": dongle.pairing, "bonds": await dongle.bonds()}
        if name == "forget-keys" and not arguments:
            return await dongle.forget_keys()
        if name == "wake" and not arguments:
            return {"was_asleep": await dongle.wake()}
        if name == "sleep" and not arguments:
            return {"was_awake": await dongle.sleep()}
        if name == "disconnect" and len(arguments) <= 1:
            reason = self.reason(arguments[0]) if arguments else REASON_TERMINATED
            await dongle.disconnect(reason)
            return {"reason": reason}
        if name == "address" and len(arguments) in (1, 2):
            return await dongle.change_identity(arguments[0].lower(), arguments[1] if len(arguments) == 2 else None)
        if name == "bootloader" and arguments in (["on"], ["off"]):
            return await dongle.bootloader(arguments[0] == "on")
        if name == "hang" and not arguments:
            return {"was_running": await dongle.hang()}
        if name == "resume" and not arguments:
            return {"was_hung": await dongle.resume()}
        if name == "gatt" and len(arguments) in (1, 2):
            if len(arguments) == 2 and arguments[1] != "drop":
                raise CommandError(f"gatt: unknown option {arguments[1]!r} (only 'drop')")
            return await dongle.change_layout(arguments[0].lower(), drop=len(arguments) == 2)
        if name == "refuse" and len(arguments) in (1, 2):
            silent = arguments[1:] == ["silent"]
            if len(arguments) == 2 and not silent:
                raise CommandError(f"refuse: unknown mode {arguments[1]!r} (only 'silent')")
            await dongle.start_refusing(self.number(arguments[0]), silent)
            return {}
        if name == "rate" and len(arguments) == 1:
            dongle.rate = self.number(arguments[0])
            return {}
        if name == "quit" and not arguments:
            self.quit.set()
            return {}
        raise CommandError(f"bad command {line!r}; commands: {self.HELP}")

    @staticmethod
    def reason(text):
        """An HCI error code for HCI_Disconnect, decimal or 0x-hex. Any byte
        but success: the controller judges it (a real one accepts only
        0x05, 0x13-0x15, 0x1A, 0x29, 0x3B; btvirt and Bumble's relay any, which
        the e2e run uses to stand in for a supervision timeout, 0x08)."""
        try:
            value = int(text, 0)
        except ValueError:
            raise CommandError(f"not a reason code: {text!r}") from None
        if not 0 < value <= 0xFF:
            raise CommandError(f"reason out of range: {text!r}")
        return value

    @staticmethod
    def number(text):
        try:
            value = float(text)
        except ValueError:
            raise CommandError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise CommandError(f"out of range: {text!r}")
        return value

    async def serve(self, path):
        if os.path.exists(path):
            os.unlink(path)  # a socket left by an earlier run
        return await asyncio.start_unix_server(self.client, path=path)

    async def client(self, reader, writer):
        try:
            while line := await reader.readline():
                reply = await self.reply(line.decode("utf-8", "replace").strip())
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, ValueError):  # client gone; a line over the reader's limit
            pass
        finally:
            writer.close()


async def main(options):
    pairing, passkey = parse_pairing(options.pairing)
    settings = Settings(options.name, options.sleep_after, options.advertise_for, options.rate, options.first_seq,
                        pairing, passkey, options.readvertise_every)
    sent_log, events = JsonLines(options.sent_log), JsonLines(options.event_log)
    async with await open_transport(options.transport) as (source, sink):
        # The random address Bumble insists on is never used: we advertise
        # with the controller's public one.
        device = Device.with_hci(options.name, Address.ANY_RANDOM, source, sink)
        dongle = Dongle(device, settings, sent_log, events)
        control = Control(dongle)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, control.quit.set)
        server = None
        try:
            await dongle.start()
            # The socket appears once the dongle advertises: `ready` means both.
            server = await control.serve(options.control) if options.control else None
            print(f"ready {dongle.address}", flush=True)
            await control.quit.wait()
            await dongle.close()
        finally:
            if server is not None:
                server.close()
                os.unlink(options.control)
            sent_log.close()
            events.close()


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transport", default="hci-socket:1",
                        help="Bumble transport (default hci-socket:1, the HCI user channel on hci1)")
    parser.add_argument("--name", default=Settings.name)
    parser.add_argument("--sleep-after", type=float, default=Settings.sleep_after, metavar="SECONDS",
                        help="idle time while connected before the dongle drops the link and sleeps")
    parser.add_argument("--advertise-for", type=float, default=Settings.advertise_for, metavar="SECONDS",
                        help="advertising time after a disconnect before the dongle sleeps")
    parser.add_argument("--rate", type=float, default=Settings.rate, help="notifications per second")
    parser.add_argument("--first-seq", type=int, default=Settings.first_seq, metavar="N",
                        help="the first notification's sequence number (a dongle started again continues)")
    parser.add_argument("--pairing", default="none", metavar="|".join(PAIRING_MODES),
                        help="none (default): no attribute needs encryption; just-works or passkey:NNNNNN: TX's CCC"
                             " descriptor and RX writes need an encrypted link, bonds kept while the process lives")
    parser.add_argument("--readvertise-every", type=float, default=Settings.readvertise_every, metavar="SECONDS",
                        help="enable the advertising set again this often while advertising (default 0: never); on"
                             " btvirt, whose controllers report an advertiser only when a scan or its advertising"
                             " starts, this stands for a real dongle's periodic advertising events")
    parser.add_argument("--control", metavar="PATH", help="control socket (unix stream)")
    parser.add_argument("--sent-log", metavar="PATH", help="JSON lines: every notification sent")
    parser.add_argument("--event-log", metavar="PATH", help="JSON lines: every event")
    parser.add_argument("--log-level", default="WARNING", help="Python logging level (DEBUG shows HCI)")
    options = parser.parse_args(argv)
    if (min(options.sleep_after, options.advertise_for) <= 0 or options.rate < 0 or options.first_seq < 1
            or options.readvertise_every < 0):
        parser.error("--sleep-after and --advertise-for must be positive, --rate and --readvertise-every not negative,"
                     " --first-seq at least 1")
    if len(options.name.encode()) > MAX_NAME_BYTES:
        parser.error(f"--name: at most {MAX_NAME_BYTES} bytes of UTF-8")
    try:
        parse_pairing(options.pairing)
    except ValueError as error:
        parser.error(str(error))
    return options


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    logging.basicConfig(level=arguments.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main(arguments))
