"""What both e2e boots' guest scripts use: waiting for a condition, and the
Bumble dongle's control socket (Tests/E2E/peripheral/dongle.py)."""

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
