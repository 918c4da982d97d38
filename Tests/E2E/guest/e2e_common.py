"""What the e2e boots' guest scripts share: waiting for a condition, the
Bumble dongle's control socket (Tests/E2E/peripheral/dongle.py), the
controller's address, the kernel's log, and the MQTT subscriber that
receives what the forwarder delivers."""

import json
import re
import subprocess
import socket
import time


def wait_until(predicate, timeout, step=0.2):
    """The predicate's first truthy value within `timeout` seconds, or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return None


def dongle_command(path, text):
    """One command on the dongle's control socket; its JSON reply (one line),
    or an exception saying what it refused."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(text.encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    answer = json.loads(reply)
    if not answer.get("ok"):
        raise RuntimeError(f"dongle: {text}: {answer.get('error')}")
    return answer


def controller_address(index):
    """hciN's address as the kernel read it during the controller's
    initialisation; None while it never finished (00:00:00:00:00:00)."""
    try:
        out = subprocess.run(["hciconfig", f"hci{index}"], capture_output=True, text=True, timeout=10).stdout
    except subprocess.TimeoutExpired:
        return None
    match = re.search(r"BD Address: (\S+)", out)
    return match.group(1) if match and match.group(1) != "00:00:00:00:00:00" else None


def kernel_log(pattern):
    try:
        lines = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in lines if re.search(pattern, line)]


def broker_answers(host="127.0.0.1"):
    """mosquitto takes a publish on its plain loopback listener."""
    return subprocess.run(["mosquitto_pub", "-h", host, "-t", "e2e/ping", "-m", "x"], capture_output=True).returncode == 0


def start_subscriber(guest, received_path, client_id):
    """A persistent QoS 1 subscriber to tether/#, subscribed before the
    forwarder connects; each message one line of `received_path` as it
    comes (line-buffered: a power cut loses none it wrote)."""
    received = open(received_path, "ab", buffering=0)
    guest.children["mosquitto_sub"] = subprocess.Popen(
        ["stdbuf", "-oL", "mosquitto_sub", "-h", "127.0.0.1", "-q", "1", "-c", "-i", client_id, "-t", "tether/#", "-v"],
        stdout=received, stderr=subprocess.STDOUT)
    time.sleep(1)


def subscribed_readings(received_path):
    """(record, its JSON text) of each reading the subscriber wrote to
    `received_path` (mosquitto_sub -v: the topic, a space, the payload), in
    arrival order; a line a power cut interrupted is skipped."""
    found = []
    try:
        text = received_path.read_text(errors="replace")
    except FileNotFoundError:
        return found
    for line in text.splitlines():
        topic, _, payload = line.partition(" ")
        if not topic.endswith("/readings"):
            continue
        try:
            record = json.loads(payload)
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append((record, payload))
    return found
