#!/usr/bin/env python3
"""The power-cut boot's host side (`E2E_BOOTS=power-cut make e2e`).

Makes an ext4 file system on a file (mkfs.ext4), gives it to the guest as a
virtio disk, and boots the guest (Tests/E2E/guest/powercut.sh) again and
again. Each boot prints `e2e-powercut: running boot N` once Tether is online,
forwarding, and the log's checks are done; the driver then waits a random
delay and kills QEMU with SIGKILL: the guest's page cache, Tether, the
forwarder and the broker die at once, as in a power cut. After CUTS cuts one
more boot checks, stops cleanly and writes results.json. The delays come from
a seeded generator; the seed is printed (E2E_SEED=S repeats them).

A boot whose test stack did not come up (`e2e-powercut: setup-failure`, e.g.
btvirt's `Opcode 0x0c03 failed: -110` three times) is booted again, up to
SETUP_RETRIES times in a row; after that the driver exits 3, as a set-up
failure. Exit 2: a boot hung or left nothing to read; otherwise the guest's
results.json decides (run.sh's report).

QEMU's disk uses its default cache mode (writeback): what the guest wrote to
the virtual disk is in the host's page cache and survives QEMU's death; what
was still in the guest's page cache is lost. Reordering or loss of writes the
guest had already submitted (a disk's volatile cache) is not modelled.
"""

import argparse
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SETUP_RETRIES = 3
# How long after the guest says it is running the plug is pulled: from an
# instant (the forwarder and Tether still catching up) to several rotations.
DELAY = (0.1, 8.0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--initrd", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cuts", type=int, default=10)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--timeout", type=int, default=300, help="seconds for a boot to say it is running")
    parser.add_argument("--append", default="", help="more kernel arguments")
    options = parser.parse_args()
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(1, 2**31)
    rng = random.Random(seed)
    print(f"power-cut: seed {seed} (E2E_SEED={seed} repeats the cut delays), {options.cuts} cuts", flush=True)

    disk = out / "disk.img"
    disk.unlink(missing_ok=True)
    with open(disk, "wb") as file:
        file.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "tether-e2e", str(disk)], check=True)

    cuts = 0
    boot = 0
    setup_failures = 0
    started = time.monotonic()
    while True:
        final = cuts >= options.cuts
        args = (f"console=ttyS0 quiet panic=-1 e2e.script=Tests/E2E/guest/powercut.sh e2e.boot={boot} "
                f"e2e.seed={seed}{' e2e.final=1' if final else ''} {options.append}")
        command = [
            "qemu-system-x86_64", "-accel", "tcg,thread=multi", "-smp", "2", "-m", "1024",
            "-nographic", "-no-reboot", "-net", "none", "-kernel", options.kernel, "-initrd", options.initrd,
            "-append", args,
            "-fsdev", "local,id=root,path=/,readonly=on,security_model=none,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=root,mount_tag=hostroot",
            "-fsdev", f"local,id=project,path={options.project},readonly=on,security_model=none,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=project,mount_tag=project",
            "-fsdev", f"local,id=out,path={out},security_model=none",
            "-device", "virtio-9p-pci,fsdev=out,mount_tag=out",
            "-drive", f"file={disk},if=virtio,format=raw",
        ]
        boot_started = time.monotonic()
        (out / "results.json").unlink(missing_ok=True)  # each ending boot writes its own
        log = open(out / f"console-{boot:02d}.log", "w", buffering=1)
        qemu = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        lines = queue.Queue()

        def pump(stream=qemu.stdout, log=log, lines=lines):
            for raw in iter(stream.readline, b""):
                line = raw.decode(errors="replace").rstrip("\r\n")
                log.write(line + "\n")
                lines.put(line)
            lines.put(None)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        deadline = boot_started + (options.timeout * 2 if final else options.timeout)
        outcome = None
        while outcome is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
                if time.monotonic() >= deadline:
                    outcome = "timeout"
                    break
                continue
            if line is None:
                outcome = "exited"
                break
            if "e2e-powercut:" in line or "e2e-init" in line or "Kernel panic" in line or "BUG:" in line:
                shown = line[line.find("e2e-"):] if "e2e-" in line else line  # past the firmware's escapes
                print(f"  [{boot:02d}] {shown.strip()}", flush=True)
            if "e2e-powercut: running boot" in line and not final:
                outcome = "running"
            elif "e2e-powercut: setup-failure" in line:
                outcome = "setup-failure"
            elif "e2e-powercut: error boot" in line:
                outcome = "error"
        if outcome == "running":
            delay = rng.uniform(*DELAY)
            # Keep reading the console meanwhile (QEMU must not block on it).
            until = time.monotonic() + delay
            while time.monotonic() < until:
                try:
                    line = lines.get(timeout=max(0.01, until - time.monotonic()))
                except queue.Empty:
                    continue
                if line is None:
                    break
            alive = qemu.poll() is None
            qemu.send_signal(signal.SIGKILL)
            qemu.wait()
            reader.join(5)
            cuts += 1
            with open(out / "cuts.jsonl", "a") as file:
                file.write(json.dumps({"cut": cuts, "boot": boot, "delay_s": round(delay, 3), "seed": seed,
                                       "boot_s": round(until - boot_started, 1), "alive": alive}) + "\n")
            print(f"power-cut: cut {cuts}/{options.cuts}: SIGKILL to QEMU {delay:.2f} s after boot {boot} said "
                  f"running ({until - boot_started:.0f} s into the boot)", flush=True)
            boot += 1
            setup_failures = 0
            continue
        if outcome in ("timeout", "error", "setup-failure"):
            # Let a guest that is ending on its own finish writing.
            try:
                qemu.wait(60 if outcome != "timeout" else 0)
            except subprocess.TimeoutExpired:
                pass
            if qemu.poll() is None:
                qemu.kill()
                qemu.wait()
        else:
            qemu.wait()
        reader.join(5)
        if outcome == "setup-failure":
            setup_failures += 1
            print(f"power-cut: boot {boot}: set-up failure ({setup_failures} of {SETUP_RETRIES}); booting again",
                  flush=True)
            boot += 1
            if setup_failures >= SETUP_RETRIES:
                print("power-cut: the test stack did not come up; a set-up failure", flush=True)
                return 3
            continue
        if outcome == "timeout":
            print(f"power-cut: boot {boot} did not report within its time; see {out}/console-{boot:02d}.log", flush=True)
            return 2
        if outcome == "exited" and not final:
            print(f"power-cut: boot {boot} ended before it said running; see {out}/console-{boot:02d}.log", flush=True)
            return 2
        break
    print(f"power-cut: {cuts} cuts, {boot + 1} boots in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
