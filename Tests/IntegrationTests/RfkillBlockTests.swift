import Foundation
import LinkPolicy
import LinkSupervisor
import Rfkill
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The daemon against rfkill blocks on its controller, with the simulator as
/// bluetoothd and a FIFO standing in for `/dev/rfkill`: the test writes the
/// kernel's events into it, and the daemon's own unblock (a write of
/// RFKILL_OP_CHANGE to the same path) comes back to it as the event the
/// kernel would then send. The simulated adapter stays powered: the block
/// alone must hold the daemon off.
@Suite(.serialized) struct RfkillBlockTests {
    /// A FIFO and a sysfs class directory naming switch 0 `hci0`, the
    /// simulator's controller. The write end is held open by the test (a
    /// FIFO without writers reads as end of file).
    final class FakeRfkill {
        let source: RfkillSource
        let writer: Int32

        init(in directory: URL) throws {
            let device = directory.appendingPathComponent("rfkill").path
            let sysfs = directory.appendingPathComponent("class-rfkill").path
            try FileManager.default.createDirectory(atPath: "\(sysfs)/rfkill0", withIntermediateDirectories: true)
            try "hci0\n".write(toFile: "\(sysfs)/rfkill0/name", atomically: true, encoding: .utf8)
            #expect(mkfifo(device, 0o600) == 0)
            writer = open(device, O_RDWR | O_CLOEXEC)
            #expect(writer >= 0)
            source = RfkillSource(device: device, sysfs: sysfs)
            send(.add, soft: false, hard: false)
        }

        enum Operation: UInt8 { case add = 0, change = 2 }

        func send(_ operation: Operation, soft: Bool, hard: Bool) {
            let event = RfkillEvent(
                index: 0, type: RfkillEvent.bluetoothType, operation: operation == .add ? .add : .change,
                softBlocked: soft, hardBlocked: hard
            )
            let bytes = event.bytes
            #expect(bytes.withUnsafeBytes { write(writer, $0.baseAddress, $0.count) } == bytes.count)
        }

        deinit { close(writer) }
    }

    func harness(escalate: [EscalationStep]) async throws -> (DaemonHarness, FakeRfkill) {
        let harness = try await DaemonHarness { config in config.reconnect.escalate = escalate }
        let rfkill = try FakeRfkill(in: harness.directory.url)
        harness.rfkill = rfkill.source
        try await harness.startDaemon()
        #expect(await harness.waitForState(.online))
        return (harness, rfkill)
    }

    @Test func aSoftBlockIsClearedByTheRfkillUnblockStepAndTheLinkComesBack() async throws {
        let (harness, rfkill) = try await harness(escalate: [.rfkillUnblock])
        let before = harness.logLines.all.count
        rfkill.send(.change, soft: true, hard: false)
        #expect(await eventually(timeout: .seconds(5)) {
            harness.logLines.all.dropFirst(before).contains { $0.contains("rfkill-unblock: done") }
        })
        #expect(await harness.waitForState(.online))
        let lines = harness.logLines.all.dropFirst(before)
        #expect(lines.contains { $0.contains("blocked by rfkill (soft block)") }, "\(lines)")
        #expect(lines.contains { $0.contains("escalating: rfkill-unblock on hci0") }, "\(lines)")
        #expect(lines.contains { $0.contains("the rfkill block on the adapter lifted") }, "\(lines)")
        #expect(harness.service?.status.adapterProblem == nil)
        await harness.stop()
    }

    @Test func withoutTheStepASoftBlockIsWaitedOutAndShownInStatus() async throws {
        let (harness, rfkill) = try await harness(escalate: [])
        rfkill.send(.change, soft: true, hard: false)
        #expect(await harness.waitForState(.waitingForAdapter))
        try await Task.sleep(for: .seconds(2))
        #expect(harness.state == .waitingForAdapter)
        let problem = harness.service?.status.adapterProblem ?? ""
        #expect(problem.contains("hci0 is blocked by rfkill (soft block)"), "\(problem)")
        #expect(problem.contains("rfkill unblock bluetooth"), "\(problem)")
        #expect(!harness.logLines.all.contains { $0.contains("escalating") })
        // An operator lifts it.
        rfkill.send(.change, soft: false, hard: false)
        #expect(await harness.waitForState(.online))
        await harness.stop()
    }

    @Test func aHardBlockIsReportedAndWaitedOutWithoutAnyStep() async throws {
        let (harness, rfkill) = try await harness(escalate: [.rfkillUnblock])
        rfkill.send(.change, soft: false, hard: true)
        #expect(await harness.waitForState(.waitingForAdapter))
        try await Task.sleep(for: .seconds(2))
        #expect(harness.state == .waitingForAdapter)
        #expect(harness.service?.status.adapterProblem?.contains("blocked by a hardware switch") == true)
        #expect(!harness.logLines.all.contains { $0.contains("escalating") })
        rfkill.send(.change, soft: false, hard: false)
        #expect(await harness.waitForState(.online))
        await harness.stop()
    }
}
