import DBus
import EventLoop
import Foundation
@testable import Simulator
import Synchronization
import TestSupport
import Testing

/// The simulator on virtual loops (`Simulator.start(connect:loops:options:)`):
/// its clocks (the dongle's idle sleep, its advertising, the telemetry, the
/// event log's timestamps) are the loop's, so a run repeats to the
/// nanosecond; a hang freezes bluetoothd's loop through the hook it is given.
///
/// Until the in-process bus exists its connections go to a private
/// dbus-daemon, whose answers come through sockets in real time: the test
/// drives the loops until the simulator is up, and from then on uses only
/// what needs no answer from the bus (handlers called directly, signals
/// sent), so that everything after the start is deterministic.
@Suite(.serialized) struct SimulatorVirtualTests {
    @Test func dongleAndEventLogReadTheInjectedClock() throws {
        let start = MonotonicInstant(nanoseconds: 5_000_000_000)
        let loop = EventLoop(virtualNamed: "simulator", startingAt: start)
        var dongle = SimulatedDongle(now: loop.now)
        var log = try EventLog(path: nil, clock: loop.clock)
        loop.advance(by: .milliseconds(250))
        dongle.linkUp(at: loop.now)
        log.record(.connected)
        #expect(dongle.idleDeadline(sleepAfter: .seconds(30)) == start + .milliseconds(30_250))
        loop.advance(by: .milliseconds(1500))
        dongle.noteActivity(at: loop.now)
        log.record(.write)
        #expect(dongle.idleDeadline(sleepAfter: .seconds(30)) == start + .milliseconds(31_750))
        #expect(log.events.map(\.t) == [250, 1750])
    }

    @Test func theDongleFallsAsleepExactlySleepAfterIntoVirtualTime() throws {
        let options = SimulatorOptions()
        let rig = try VirtualSimulator(options: options)
        defer { rig.close() }
        let start = rig.loops.now
        rig.spawn { try? await $0.connectDevice(client: ":1.99") }
        let linkUp = start + options.connectLatency
        rig.loops.advance(to: linkUp)
        #expect(try rig.run { $0.state } == .connected)

        rig.loops.advance(to: linkUp + options.sleepAfter + .nanoseconds(-1))
        #expect(try rig.run { $0.state } == .connected, "asleep before sleepAfter passed")
        rig.loops.advance(to: linkUp + options.sleepAfter)
        #expect(try rig.run { $0.state } == .asleep)

        let events = try rig.run { $0.events }
        #expect(events.first { $0.kind == .connected }?.t == 30)
        let sleep = try #require(events.last)
        #expect(sleep.kind == .sleep)
        #expect(sleep.reason == "idle")
        #expect(sleep.t == 30_030)
    }

    @Test func aRunRepeatsExactly() throws {
        let first = try Self.connectNotifyAndSleep()
        let second = try Self.connectNotifyAndSleep()
        #expect(first == second)
        #expect(first.filter { $0.kind == .notify }.count > 250, "30 s of notifications at 10 per second")
        #expect(first.last?.kind == .sleep)
        #expect(first.last?.reason == "advertising-timeout")
        // Woken at 31 s, it advertises for 180 s.
        #expect(first.last?.t == 211_000)
    }

    @Test func aHangFreezesBluetoothdsLoopForItsDuration() throws {
        let rig = try VirtualSimulator(options: SimulatorOptions())
        defer { rig.close() }
        let start = rig.loops.now
        try rig.run { $0.hang(for: .seconds(5)) }
        #expect(rig.loops.isFrozen(rig.bluetoothd))
        #expect(!rig.loops.isFrozen(rig.simulatorLoop))
        rig.loops.advance(to: start + .seconds(5) + .nanoseconds(-1))
        #expect(rig.loops.isFrozen(rig.bluetoothd))
        rig.loops.advance(to: start + .seconds(5))
        #expect(!rig.loops.isFrozen(rig.bluetoothd))
        #expect(try rig.run { $0.events }.last?.kind == .hang)
    }

    /// Connect, subscribe to TX, let the dongle sleep when idle, wake it and
    /// let its advertising time out: the event log.
    private static func connectNotifyAndSleep() throws -> [SimulatorEvent] {
        let options = SimulatorOptions()
        let rig = try VirtualSimulator(options: options)
        defer { rig.close() }
        let start = rig.loops.now
        rig.spawn { try? await $0.connectDevice(client: ":1.99") }
        rig.loops.advance(to: start + .milliseconds(100))
        rig.spawn { try? await $0.startNotify($0.gatt.tx, client: ":1.99") }
        rig.loops.advance(to: start + .seconds(31))
        rig.spawn { await $0.wake() }
        rig.loops.advance(to: start + .seconds(31 + 181))
        return try rig.run { $0.events }
    }
}

/// A simulator on two virtual loops (its own, bluetoothd's) of one
/// `VirtualLoops`, connected to a private dbus-daemon, driven by the test's
/// thread, which made the loops.
final class VirtualSimulator {
    let directory: TemporaryDirectory
    let daemon: BusDaemonProcess
    let loops = VirtualLoops()
    let simulatorLoop: EventLoop
    let bluetoothd: EventLoop
    private(set) var simulator: Simulator?

    init(options: SimulatorOptions) throws {
        directory = try TemporaryDirectory("simulator-virtual")
        daemon = try BusDaemonProcess(directory: directory.url.appendingPathComponent("bus"))
        simulatorLoop = loops.makeLoop(named: "simulator")
        bluetoothd = loops.makeLoop(named: "bluetoothd")
        // Called on the simulator's loop, that is on this thread.
        let driver = loops
        let simulatorLoops = SimulatorLoops(simulator: simulatorLoop, bluetoothd: bluetoothd) { loop, duration in
            driver.freeze(loop, until: loop.now + duration)
        }
        let address = daemon.address
        let started = Outcome<Result<Simulator, any Error>>()
        Task(executorPreference: simulatorLoop) {
            do {
                let simulator = try await Simulator.start(
                    connect: { loop throws(DBusError) in try await Bus.connect(address: address, on: loop) },
                    loops: simulatorLoops, options: options
                )
                started.set(.success(simulator))
            } catch {
                started.set(.failure(error))
            }
        }
        try drive { started.value != nil }
        simulator = try started.value?.get()
    }

    /// Runs the loops until `done`; while nothing is runnable, the bus
    /// daemon's answer is on its way through a socket: look again shortly.
    func drive(until done: () -> Bool) throws {
        let giveUp = MonotonicInstant.now + .seconds(30)
        while !done() {
            if loops.runUntilIdle() == 0 { usleep(200) }
            guard MonotonicInstant.now < giveUp else { throw VirtualSimulatorError.noProgress }
        }
    }

    /// Starts `body` on the simulator, in a task on its loop; it runs when the loops are driven.
    func spawn(_ body: @escaping @Sendable (isolated Simulator) async -> Void) {
        guard let simulator else { return }
        Task(executorPreference: simulatorLoop) { await body(simulator) }
    }

    /// `body`'s result, on the simulator at the loops' present instant.
    func run<Value: Sendable>(_ body: @escaping @Sendable (isolated Simulator) async -> Value) throws -> Value {
        let result = Outcome<Value>()
        spawn { simulator in result.set(await body(simulator)) }
        try drive { result.value != nil }
        guard let value = result.value else { throw VirtualSimulatorError.noProgress }
        return value
    }

    func close() {
        try? run { await $0.stop() }
        simulator = nil
        loops.runUntilIdle()
        daemon.stop()
        directory.remove()
    }
}

enum VirtualSimulatorError: Error {
    case noProgress
}

/// A value a task on a loop hands to the test's thread.
final class Outcome<Value: Sendable>: Sendable {
    private let state = Mutex<Value?>(nil)

    func set(_ value: Value) { state.withLock { $0 = value } }
    var value: Value? { state.withLock { $0 } }
}
