import ArgumentParser
import CommandLineArguments
import Configuration
import DBus
import EventLoop
import Foundation
import Simulator
import TetherDaemon

struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Run a simulated bluetoothd with one Nordic dongle that really falls asleep.",
        discussion: """
            The simulator owns org.bluez on the given bus and follows BlueZ's D-Bus API (adapter hci0, \
            one dongle with the Nordic UART Service and the Battery Service). With no GATT read or write \
            for --sleep-after, the dongle drops the link and sleeps until woken. Knobs are on the bus \
            name io.tether.Simulator, object /io/tether/Simulator, interface io.tether.Simulator1:
              DropLink(s reason), Sleep(), Wake(), FailConnects(u count, s error, s message),
              SetConnectLatency(u ms), SetNotifyRate(d per_second), SetAdapterPowered(b),
              Crash(u restart_after_ms), Restart(u restart_after_ms), Hang(u ms),
              HangApplication(b att_answers), ResumeApplication(), ChangeGattLayout(), SetStaleDevice(b),
              RemoveAdapter(), AddAdapter(s name, s address), Rfkill(s blocks), Lockup(b on, b clears_on_power_cycle),
              ForgetKeys(), SetOtherAdvertisers(u count), SetBootloader(b on),
              StallScan(s none|until-restart|until-reset)
            SetBootloader(true) puts the dongle in Nordic's DFU bootloader (DfuTarg at its address plus             one advertises, the dongle does not); false starts the updated dongle. StallScan makes the             scan deliver no advertisement while Discovering stays true, until discovery is started again             (until-restart) or the adapter is power-cycled (until-reset).             Hang is bluetoothd's main loop hung for that long: it keeps org.bluez but answers nothing \
            (not even a D-Bus ping), sends no signal and passes no GATT traffic, so the dongle's idle \
            clock runs on. \
            HangApplication is the field fault of a dongle whose application hangs while its radio keeps \
            the link: no notifications, writes without response accepted, no idle sleep; with \
            att_answers true (a Nordic SoftDevice) write requests and reads are answered, with false \
            they wait --att-timeout and then fail ("Operation failed") and drop the link, as BlueZ's ATT \
            layer does. After a link loss the hung dongle still advertises and accepts connections. \
            ChangeGattLayout is a firmware update that moves every handle (the Secure DFU service \
            first, or back): while connected bluetoothd replaces the GATT objects at once (Service \
            Changed), otherwise at the next connection. SetStaleDevice(true) makes every Connect fail \
            with le-connection-abort-by-local until the device object is removed (RemoveDevice). \
            RemoveAdapter takes the controller out of the kernel (a USB replug or reset); AddAdapter \
            brings one back under a name such as hci1: with the same address, bluetoothd exports the \
            dongle it knew under the new adapter. \
            With --rfkill DIR the simulator serves a /dev/rfkill of its own: the socket DIR/rfkill \
            (SOCK_SEQPACKET, one 8-byte struct rfkill_event per datagram: ADD for the controller's switch \
            on connect, then CHANGE; a written RFKILL_OP_CHANGE sets the soft block) and \
            DIR/class-rfkill/rfkillN/name; point `tether run` at it with TETHER_RFKILL_DEVICE=DIR/rfkill \
            TETHER_RFKILL_SYSFS=DIR/class-rfkill. Rfkill("none"|"soft"|"hard"|"soft+hard") sets the \
            switch's blocks: a block powers the adapter off (the link drops), and bluetoothd powers it on \
            again once no block is left; a client's unblock clears only the soft block. "soft-held" is a \
            soft block another program keeps: blocked again at once after a client's unblock. \
            Lockup(true, clears) makes the controller stop answering: Powered stays true, the link stays \
            Connected in bluetoothd while the dongle loses it, no notifications, calls that need the \
            controller fail after --hci-command-timeout (GATT requests after --att-timeout) or, for \
            Disconnect, wait; Lockup(false, _) ends it, and with clears true so does a power cycle \
            through Adapter1.Powered (the simulator sees no HCI or USB reset; RemoveAdapter ends it too). \
            With --pairing just-works or passkey=NNNNNN the dongle's GATT requests need an encrypted link: \
            bluetoothd pairs when asked (Device1.Pair, with the caller's or the default agent registered \
            through org.bluez.AgentManager1 on /org/bluez) or by itself when a request needs it (the \
            default agent's RequestAuthorization or RequestPasskey), and keeps the bond across restarts. \
            ForgetKeys() is the dongle's factory reset: bluetoothd stays Paired, and every Connect from \
            then on fails with le-connection-abort-by-local right after Connected=true, until RemoveDevice.
            Example: busctl --address=ADDRESS call io.tether.Simulator /io/tether/Simulator \
            io.tether.Simulator1 DropLink s timeout
            """
    )

    @Option(help: "The bus to serve on (a D-Bus address).")
    var bus: String?

    @Option(help: "Start a private dbus-daemon in this directory and write its address to DIR/address.")
    var spawnBus: String?

    @Option(help: "The dongle's address.")
    var address = "AA:BB:CC:DD:EE:FF"

    @Option(help: "The dongle's advertised name.")
    var name = "Tether-Dongle"

    @Option(help: "Idle time after which the dongle sleeps.")
    var sleepAfter = DurationArgument(.seconds(30))

    @Option(help: "How long the dongle advertises after a drop before it sleeps.")
    var advertiseTimeout = DurationArgument(.seconds(180))

    @Option(help: "Telemetry notifications per second.")
    var notifyRate: Double = 10

    @Option(help: "Time a successful or failing connect takes.")
    var connectLatency = DurationArgument(.milliseconds(30))

    @Option(help: "Time from Connected to ServicesResolved.")
    var resolveDelay = DurationArgument(.milliseconds(20))

    @Option(help: "How long a connect to the sleeping dongle goes unanswered before it fails (the kernel: about 20s).")
    var noAnswerTimeout = DurationArgument(.seconds(20))

    @Option(help: "BlueZ's ATT request timeout, for requests a hung dongle never answers (real bluetoothd: 30s).")
    var attTimeout = DurationArgument(.seconds(30))

    @Option(help: "Other devices advertising on the same air (a busy street), each reported by discovery once per --other-advertising-interval (0: a quiet place; the SetOtherAdvertisers knob changes it).")
    var otherAdvertisers = 0

    @Option(help: "How often each of the other advertisers is reported (100ms to 1h; a busy street: 200ms, 5 a second each).")
    var otherAdvertisingInterval = DurationArgument(.seconds(1))

    @Option(help: "An identical dongle of another vehicle at this address: the same name and services, 15 dB stronger, seen by discovery; it takes no connection (the event log says connect-request, reason twin).")
    var twin: String?

    @Option(help: "The identity address the dongle hands over when it bonds (a dongle using resolvable private addresses): after a pairing that bonds, Device1.Address becomes it, on the same object, as bluetoothd does. The SetBootloader(b) knob puts the dongle in its DFU bootloader (DfuTarg at the address plus one).")
    var identityAddress: String?

    @Option(help: "Time a Disconnect takes (real bluetoothd: about 2s).")
    var disconnectDelay = DurationArgument(.milliseconds(100))

    @Flag(help: "Send Device1.Disconnected(reason, message) with every link loss, as BlueZ 5.83 and later do.")
    var disconnectedSignal = false

    @Flag(help: "Start with the dongle unknown to bluetoothd (found only by discovery).")
    var unknown = false

    @Flag(help: "Send ServicesResolved before the GATT objects, as real BlueZ sometimes does.")
    var resolvedBeforeObjects = false

    @Flag(help: "Never signal Connected=true (ServicesResolved=true is the only sign), as bluetoothd 5.66 sometimes does.")
    var connectedUnsignalled = false

    @Flag(help: "Send the first notification in the same PropertiesChanged as Notifying=true, as bluetoothd can.")
    var valueWithNotifying = false

    @Flag(help: "Remove the GATT objects on every link loss (BlueZ with Cache=no); by default they stay, as with BlueZ's default Cache=always.")
    var noGattCache = false

    @Option(help: "AcquireNotify: time from the CCCD write to the socket; bluetoothd drops the notifications in between.")
    var acquireSocketDelay = DurationArgument(.zero)

    @Option(help: "AcquireNotify: SO_SNDBUF of bluetoothd's end of the socket in bytes (small: a slow reader loses notifications).")
    var acquireSendBuffer: Int?

    @Option(help: "The kernel's HCI command timeout, after which calls to a locked-up controller fail (the kernel: 2s).")
    var hciCommandTimeout = DurationArgument(.seconds(2))

    @Option(help: "Serve a simulated /dev/rfkill in this directory (DIR/rfkill, a socket, and DIR/class-rfkill).")
    var rfkill: String?

    @Option(help: "What the dongle asks before its GATT works: none, just-works or passkey=NNNNNN (it displays that passkey).")
    var pairing = "none"

    @Option(help: "How long bluetoothd waits for an agent's answer before it gives up and sends Cancel() (real bluetoothd: 60s).")
    var agentTimeout = DurationArgument(.seconds(60))

    @Option(help: "Append every event (JSON Lines) to this file.")
    var eventLog: String?

    func validate() throws {
        guard (bus == nil) != (spawnBus == nil) else {
            throw ValidationError("give exactly one of --bus ADDRESS or --spawn-bus DIR")
        }
        guard notifyRate >= 0, notifyRate <= 100_000 else { throw ValidationError("--notify-rate must be 0…100000") }
        if let acquireSendBuffer, acquireSendBuffer < 1 { throw ValidationError("--acquire-send-buffer must be at least 1") }
        do {
            _ = try DonglePairing(parsing: pairing)
        } catch {
            throw ValidationError("--" + error.description)
        }
    }

    func run() async throws {
        var options = SimulatorOptions()
        options.address = address.uppercased()
        options.name = name
        options.sleepAfter = sleepAfter.duration
        options.advertiseTimeout = advertiseTimeout.duration
        options.notifyRate = notifyRate
        options.connectLatency = connectLatency.duration
        options.resolveDelay = resolveDelay.duration
        options.disconnectDelay = disconnectDelay.duration
        options.noAnswerTimeout = noAnswerTimeout.duration
        guard otherAdvertisers >= 0, otherAdvertisers <= 0xFFFF else {
            throw ValidationError("--other-advertisers must be 0 to 65535, not \(otherAdvertisers)")
        }
        options.otherAdvertisers = otherAdvertisers
        guard otherAdvertisingInterval.duration >= options.advertisingInterval, otherAdvertisingInterval.duration <= .seconds(3600) else {
            throw ValidationError("--other-advertising-interval must be 100ms to 1h, not \(otherAdvertisingInterval)")
        }
        options.otherAdvertisingInterval = otherAdvertisingInterval.duration
        if let twin {
            guard let address = BluetoothAddressText.normalize(twin) else { throw ValidationError("--twin must be a Bluetooth address, not \(twin)") }
            options.twinAddress = address
        }
        if let identityAddress {
            guard let address = BluetoothAddressText.normalize(identityAddress) else {
                throw ValidationError("--identity-address must be a Bluetooth address, not \(identityAddress)")
            }
            options.identityAddress = address
        }
        options.attTimeout = attTimeout.duration
        options.disconnectedSignal = disconnectedSignal
        options.known = !unknown
        options.resolvedBeforeObjects = resolvedBeforeObjects
        options.connectedUnsignalled = connectedUnsignalled
        options.valueWithNotifying = valueWithNotifying
        options.gattCache = !noGattCache
        options.acquireSocketDelay = acquireSocketDelay.duration
        options.acquireSendBuffer = acquireSendBuffer
        options.hciCommandTimeout = hciCommandTimeout.duration
        options.rfkillDirectory = rfkill
        options.eventLogPath = eventLog
        options.pairing = try DonglePairing(parsing: pairing)
        options.agentTimeout = agentTimeout.duration

        var daemon: BusDaemonProcess?
        let address: String
        if let spawnBus {
            let started = try BusDaemonProcess(directory: URL(fileURLWithPath: spawnBus))
            try (started.address + "\n").write(toFile: spawnBus + "/address", atomically: false, encoding: .utf8)
            address = started.address
            daemon = started
            print(address)
        } else {
            address = bus ?? ""
        }
        let simulator = try await Simulator.start(busAddress: address, options: options)
        FileHandle.standardError.write(Data("simulated bluetoothd on \(address) (dongle \(options.address))\n".utf8))
        _ = try await TerminationSignal.wait(on: EventLoop.shared)
        await simulator.stop()
        daemon?.stop()
    }
}
