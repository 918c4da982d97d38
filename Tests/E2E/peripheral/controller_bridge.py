"""What the e2e's controller bridges share (usb_controller.py: a USB
gadget; uart_controller.py: a pseudo-terminal speaking H4): a Bumble
controller on an air with the dongle, the faults every bridge takes
(a wedge, a new address), and the control socket's protocol (dongle.py's:
one command a line, one JSON line back).

A bridge subclasses ControllerBridge and keeps `air`, `controller` (the
current attachment's FaithfulController, or None), `generation` (bumped
whenever the controller changes: what an older one sent is dropped),
`answering` and `next_address`; its control socket subclasses BridgeControl
and answers its own commands in `run_own`.
"""

import asyncio
import json
import os

from bumble_air import leave_air
from bumble.hci import Address


def say(text):
    print(text, flush=True)


def plain(address):
    return None if address is None else str(address).split("/")[0]  # Bumble adds "/P"


class ControllerBridge:
    def retire(self):
        """The controller of the last attachment (enumeration) leaves the air."""
        self.generation += 1
        if self.controller is not None:
            leave_air(self.air.link, self.controller, [self.air.dongle_controller])
            self.controller.host = None
            self.controller = None

    def stop_answering(self, radio_off=False):
        """Wedged firmware. `radio_off`: its link layer stopped too, so the
        dongle's link ends as a supervision timeout ends it (0x08) and the
        dongle advertises again, as a real one does; without it the dongle
        keeps a link that carries nothing (until its idle sleep)."""
        was = self.answering
        self.answering = False
        if radio_off and self.controller is not None:
            leave_air(self.air.link, self.controller, [self.air.dongle_controller])
        say("not answering" + (", radio off" if radio_off else ""))
        return {"was_answering": was, "radio_off": radio_off}

    def new_address(self, text):
        """The next attachment (enumeration) comes back with this public address."""
        self.next_address = Address(text, Address.PUBLIC_DEVICE_ADDRESS)
        return {"next_address": plain(self.next_address)}


class BridgeControl:
    """A bridge's control socket: the commands every bridge takes, then the
    subclass's own (`run_own`, None for a command it does not know)."""

    HELP = "status | stop-answering [radio-off] | new-address ADDR | street on|off | quit"

    def __init__(self, bridge, quit_event):
        self.bridge, self.quit = bridge, quit_event

    def run(self, line):
        words = line.split()
        name, arguments = (words[0].lower(), words[1:]) if words else ("", [])
        bridge = self.bridge
        if name == "status" and not arguments:
            return bridge.status()
        if name == "stop-answering" and arguments in ([], ["radio-off"]):
            return bridge.stop_answering(radio_off=bool(arguments))
        if name == "new-address" and len(arguments) == 1:
            return bridge.new_address(arguments[0])
        if name == "street" and arguments in (["on"], ["off"]):
            asyncio.ensure_future(bridge.air.street.set_advertising(arguments[0] == "on"))
            return {"others": len(bridge.air.street.devices), "advertising": arguments[0] == "on"}
        if name == "quit" and not arguments:
            self.quit.set()
            return {}
        reply = self.run_own(name, arguments)
        if reply is None:
            raise ValueError(f"bad command {line!r}; commands: {self.HELP}")
        return reply

    def run_own(self, name, arguments):
        return None

    async def client(self, reader, writer):
        try:
            while line := await reader.readline():
                text = line.decode("utf-8", "replace").strip()
                try:
                    reply = {"ok": True, **self.run(text)}
                except Exception as error:  # noqa: BLE001 - answered, never fatal
                    reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def serve(self, path):
        if os.path.exists(path):
            os.unlink(path)
        return await asyncio.start_unix_server(self.client, path=path)
