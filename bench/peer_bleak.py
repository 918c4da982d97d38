#!/usr/bin/env python3
"""The Python peer Tether is benchmarked against: bleak + bleak-retry-connector.

Does what Tether does, the way a short Python script would: connect by
address, subscribe to NUS TX, write a keep-alive to NUS RX every interval,
reconnect on disconnect, append each notification as a JSON line, fsync the
file every second, flush and exit 0 on SIGTERM/SIGINT.

With --mqtt HOST:PORT it also publishes each notification's JSON line to a
broker straight from memory, as BLE-to-MQTT gateways (Theengs Gateway,
ble2mqtt) do: paho-mqtt's own network thread, QoS --mqtt-qos (1 by default,
the same guarantee per message as Tether's forwarder), nothing kept on disk
for the broker: what is queued in memory dies with the process.

    peer_bleak.py --address AA:BB:CC:DD:EE:FF --out DIR [--interval 1.0] [--mqtt 127.0.0.1:1883]

bleak talks to the system bus; DBUS_SYSTEM_BUS_ADDRESS points it elsewhere
(dbus-fast reads it). Status lines on stdout: "online", "offline", "error …".
"""

import argparse
import asyncio
import datetime
import json
import os
import signal
import sys

from bleak import BleakClient
from bleak_retry_connector import BleakClientWithServiceCache, establish_connection, get_device

RX = "6e400002-b5a3-f393-e0a9-e50e24dcca9e"
TX = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"


def say(*words):
    print(*words, flush=True)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--out", required=True, help="readings directory")
    parser.add_argument("--interval", type=float, default=1.0, help="keep-alive interval, seconds")
    parser.add_argument("--retry-pause", type=float, default=1.0, help="pause after a failed connect, seconds")
    parser.add_argument("--acquire-notify", action="store_true",
                        help="subscribe with AcquireNotify (bleak's use_start_notify=False); default StartNotify, bleak's default")
    parser.add_argument("--mqtt", help="HOST:PORT of a broker to publish every reading to")
    parser.add_argument("--mqtt-topic", default="peer/readings")
    parser.add_argument("--mqtt-qos", type=int, default=1)
    args = parser.parse_args()

    mqtt = None
    if args.mqtt:
        import paho.mqtt.client as paho  # only the forwarding benchmark needs it

        host, _, port = args.mqtt.rpartition(":")
        mqtt = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="peer-forwarder", clean_session=False)
        mqtt.max_inflight_messages_set(64)
        mqtt.max_queued_messages_set(0)  # unlimited: queue in memory while the broker is away
        mqtt.reconnect_delay_set(1, 60)
        mqtt.connect_async(host, int(port), keepalive=30)
        mqtt.loop_start()

    os.makedirs(args.out, exist_ok=True)
    out = open(os.path.join(args.out, "readings.jsonl"), "a", encoding="utf-8")
    seq = 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def on_notify(_char, data: bytearray) -> None:
        nonlocal seq
        seq += 1
        now = datetime.datetime.now(datetime.timezone.utc)
        line = json.dumps({
            "ts": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "seq": seq, "device": args.address, "char": TX, "source": "notify", "hex": data.hex(),
        }, separators=(",", ":"))
        out.write(line + "\n")
        if mqtt is not None:
            mqtt.publish(args.mqtt_topic, line, qos=args.mqtt_qos)

    async def flusher() -> None:
        while True:
            await asyncio.sleep(1.0)
            out.flush()
            os.fsync(out.fileno())

    async def link() -> None:
        while True:
            disconnected = asyncio.Event()
            try:
                device = await get_device(args.address)
                if device is None:
                    raise RuntimeError(f"{args.address} not known to BlueZ")
                client: BleakClient = await establish_connection(
                    BleakClientWithServiceCache, device, args.address,
                    disconnected_callback=lambda _c: disconnected.set(),
                )
                await client.start_notify(TX, on_notify, bluez={"use_start_notify": not args.acquire_notify})
                say("online")
                next_poll = loop.time()
                while not disconnected.is_set():
                    await client.write_gatt_char(RX, b"\x00", response=False)
                    next_poll += args.interval
                    try:
                        await asyncio.wait_for(disconnected.wait(), max(0.0, next_poll - loop.time()))
                    except asyncio.TimeoutError:
                        pass
                say("offline")
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - reconnect on anything
                say("error", type(error).__name__, str(error).replace("\n", " "))
                await asyncio.sleep(args.retry_pause)

    tasks = [asyncio.create_task(flusher()), asyncio.create_task(link())]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    out.flush()
    os.fsync(out.fileno())
    out.close()
    if mqtt is not None:
        mqtt.disconnect()
        mqtt.loop_stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
