import EventLoop
import Foundation
import Synchronization
@testable import TetherDaemon
import Testing

struct ClockSetWatchTests {
    final class Heard: Sendable {
        let steps = Mutex<[ClockSetWatch.Step]>([])
    }

    /// A Raspberry Pi's first NTP answer after a boot at 1970.
    @Test func aStepSaysHowFarAndFromWhatToWhat() {
        let step = ClockSetWatch.Step(
            before: Date(timeIntervalSince1970: 42), after: Date(timeIntervalSince1970: 1_796_553_060))
        #expect(step.description.hasPrefix(
            "the system clock was set forward by 56 years 353 days (it read 1970-01-01T00:00:42.000Z; now 2026-12-06T10:31:00.000Z)"))
        let back = ClockSetWatch.Step(
            before: Date(timeIntervalSince1970: 1_796_553_060), after: Date(timeIntervalSince1970: 1_796_553_060 - 7200))
        #expect(back.description.hasPrefix("the system clock was set back by 2 hours 0 minutes"))
        #expect(back.moved == .seconds(-7200))
        #expect(ClockSetWatch.Step.span(1_250) == "1.250 s")
        #expect(ClockSetWatch.Step.span(7) == "0.007 s")
    }

    /// The timerfd on the loop hears a step at once. Setting the clock needs
    /// CAP_SYS_TIME (root on a machine, not in most containers): the test
    /// sets it to what it reads, a step of microseconds, and skips without.
    @Test func aStepOfTheRealClockIsHeardOnTheLoop() async throws {
        let loop = EventLoop(name: "clock-watch-test")
        defer { loop.stop() }
        let heard = Heard()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask(executorPreference: loop) {
                try await ClockSetWatch.run(on: loop) { step in heard.steps.withLock { $0.append(step) } }
            }
            try await Task.sleep(for: .milliseconds(100))
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            guard clock_settime(CLOCK_REALTIME, &now) == 0 else {
                let reason = String(cString: strerror(errno))
                group.cancelAll()
                print("skipped: setting the clock needs CAP_SYS_TIME: \(reason)")
                return
            }
            let deadline = ContinuousClock.now + .seconds(3)
            while heard.steps.withLock({ $0.isEmpty }), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            group.cancelAll()
            let steps = heard.steps.withLock { $0 }
            #expect(steps.count == 1, "\(steps)")
            #expect(steps.first.map { abs($0.moved.components.seconds) < 1 } == true, "\(steps)")
        }
    }
}
