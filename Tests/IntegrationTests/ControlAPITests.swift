import Configuration
import ControlAPI
import DBus
import Foundation
import Simulator
import Synchronization
import TestSupport
import Testing
import TetherDaemon

/// io.tether.Tether1 served by the daemon's link service against the
/// simulator, read and driven by `ControlClient` on another connection.
@Suite(.serialized) struct ControlAPITests {
    private func withControl(
        _ body: (DaemonHarness, ControlClient) async throws -> Void
    ) async throws {
        var options = SimulatorOptions()
        options.notifyRate = 50
        let harness = try await DaemonHarness(simulator: options)
        do {
            try await harness.startDaemon()
            let address = try await harness.startControl()
            let bus = try await Bus.connect(address: harness.busDaemon.address)
            try await body(harness, ControlClient(bus: bus, address: address))
            await bus.close()
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    @Test func statusPropertiesFollowTheLinkAndReadingsAreLive() async throws {
        try await withControl { harness, client in
            #expect(await harness.waitForState(.online))
            #expect(await eventually { (try? await client.status().state) == .online })
            let first = try await client.status()
            #expect(first.device == DaemonHarness.address)
            #expect(first.adapter == "hci0")
            let since = try #require(first.connectedSince)
            #expect(abs(since.timeIntervalSinceNow) < 30)
            #expect(first.nextAttemptIn == nil)
            // ReadingsWritten is computed on each Get: it grows without any signal.
            #expect(await eventually { ((try? await client.status().readingsWritten) ?? 0) > first.readingsWritten + 20 })
            #expect(try await client.status().lastReadingAt != nil)

            let xml = try await client.bus.call(
                destination: client.address.busName, path: client.address.path,
                interface: StandardInterface.introspectable, method: "Introspect"
            ).first?.string ?? ""
            for property in ["State", "Device", "Adapter", "ConnectedSince", "LastReadingAt", "ReadingsWritten",
                             "ReadingsPending", "ReadingsDropped", "ReadingsError",
                             "Reconnects", "WindowAttempt", "NextAttemptIn", "LastError"] {
                #expect(xml.contains("<property name=\"\(property)\""), "\(property) missing from introspection")
            }
            #expect(xml.contains("<method name=\"Reconnect\">"))
            #expect(xml.contains("<signal name=\"StateChanged\">"))
        }
    }

    /// ConnectedSince and the other moments are announced as dates when they
    /// change; a step of the wall clock (NTP's first answer after a boot at
    /// 1970) must announce them again in the clock's new frame, or
    /// `tether status` says "connected for 56 years" (seen in make e2e's
    /// clock-unsynced before the fix).
    @Test func aClockStepAnnouncesTheMomentsAgainInTheNewFrame() async throws {
        try await withControl { harness, client in
            #expect(await harness.waitForState(.online))
            #expect(await eventually { (try? await client.status().state) == .online })
            let before = try #require(try await client.status().connectedSince)
            let step: TimeInterval = 56 * 365 * 86_400
            harness.wallOffset.set(step)
            let service = try #require(harness.service)
            service.clockWasSet()
            #expect(await eventually {
                guard let after = try? await client.status().connectedSince else { return false }
                return abs(after.timeIntervalSince(before) - step) < 5
            }, "ConnectedSince stays in the old frame after a clock step")
            #expect(try await client.status().state == .online)
        }
    }

    @Test func reconnectStartsAnAttemptAndTransitionsAreAnnounced() async throws {
        try await withControl { harness, client in
            #expect(await harness.waitForState(.online))
            // The daemon publishes a state after it enters it: wait until the bus shows it.
            #expect(await eventually { (try? await client.status().state) == .online })
            let connectsBefore = await harness.simulator.connectCount
            let changes = try await client.stateChanges()
            let attempt = try await client.reconnect()
            #expect(attempt >= 1, "Reconnect returns once an attempt has started")
            var seen: [String] = []
            for await change in changes {
                // The first online's StateChanged may still reach a subscription made just after it.
                if seen.isEmpty, change.to == "online" { continue }
                seen.append("\(change.from)→\(change.to)")
                if change.to == "online" { break }
            }
            #expect(seen.first?.hasPrefix("online→") == true, "\(seen)")
            #expect(seen.contains { $0.hasSuffix("→connecting") }, "\(seen)")
            // Online from waiting-for-data, or straight from subscribing when a
            // notification came in before AcquireNotify's answer was handled.
            #expect(["waiting-for-data→online", "subscribing→online"].contains(seen.last ?? ""), "\(seen)")
            #expect(await harness.simulator.connectCount > connectsBefore)
            #expect(try await client.status().state == .online)
        }
    }

    /// Any local user may send signals: a StateChanged that does not come
    /// from the daemon's connection never reaches `tether reconnect --wait`.
    @Test func aForgedStateChangedIsNotBelieved() async throws {
        try await withControl { harness, client in
            #expect(await harness.waitForState(.online))
            #expect(await eventually { (try? await client.status().state) == .online })
            let changes = try await client.stateChanges()
            var iterator = changes.makeAsyncIterator()
            let attacker = try await Bus.connect(address: harness.busDaemon.address)
            let victim = await client.bus.uniqueName
            for destination in [victim, nil] {
                try await attacker.emit(
                    path: client.address.path, interface: ControlAddress.interface, member: "StateChanged",
                    [.string("online"), .string("disconnected"), .string("forged")], destination: destination
                )
            }
            _ = try await attacker.nameOwner(of: "org.freedesktop.DBus")
            _ = try await client.reconnect()
            let first = await iterator.next()
            #expect(first?.cause != "forged", "\(String(describing: first))")
            #expect(first?.from == "online")
            await attacker.close()
        }
    }

    /// Reconnect resets the backoff and the cool-down: it acts at most
    /// `ReconnectRateLimit.burst` times in a window, then says when to retry.
    @Test func reconnectIsRateLimited() async throws {
        try await withControl { harness, client in
            #expect(await harness.waitForState(.online))
            for _ in 0..<ReconnectRateLimit.burst {
                _ = try await client.reconnect()
            }
            let connects = await harness.simulator.connectCount
            do throws(ControlClient.Failure) {
                _ = try await client.reconnect()
                Issue.record("a reconnect beyond the limit was served")
            } catch {
                guard case .refused(let message) = error else {
                    Issue.record("expected RateLimited, got \(error)")
                    return
                }
                #expect(message.contains("try again in"), "\(message)")
            }
            #expect(await harness.simulator.connectCount == connects)
        }
    }

    @Test func reconnectWithTheAdapterOffSaysWhy() async throws {
        try await withControl { harness, client in
            #expect(await harness.waitForState(.online))
            await harness.simulator.setAdapterPowered(false)
            #expect(await harness.waitForState(.waitingForAdapter))
            do throws(ControlClient.Failure) {
                _ = try await client.reconnect()
                Issue.record("Reconnect succeeded with the adapter off")
            } catch {
                guard case .refused(let message) = error else {
                    Issue.record("expected NotReady, got \(error)")
                    return
                }
                #expect(message.contains("powered off"), "\(message)")
            }
            #expect(await eventually { (try? await client.status().state) == .waitingForAdapter })
            await harness.simulator.setAdapterPowered(true)
            #expect(await harness.waitForState(.online))
        }
    }

    @Test func aStoppedDaemonIsNotRunning() async throws {
        let harness = try await DaemonHarness()
        let bus = try await Bus.connect(address: harness.busDaemon.address)
        let client = ControlClient(bus: bus, address: ControlAddress(instance: try InstanceName("east-1")))
        #expect(client.address.busName == "io.tether.Tether.east_2d1")
        #expect(try await client.isRunning() == false)
        do throws(ControlClient.Failure) {
            _ = try await client.status()
            Issue.record("status of a daemon that is not running succeeded")
        } catch {
            if case .notRunning = error {} else { Issue.record("expected notRunning, got \(error)") }
            #expect(error.description.contains("tether@east-1.service"))
        }
        await bus.close()
        await harness.stop()
    }
}
