import Systemd
import Testing

@Suite struct WatchdogIntervalTests {
    private let pid: Int32 = 4242

    @Test func usecWithoutPidApplies() {
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "30000000"], pid: pid) == .seconds(30))
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "1500"], pid: pid) == .microseconds(1500))
    }

    @Test func matchingPidApplies() {
        let environment = ["WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "4242"]
        #expect(SystemdNotifier.watchdogInterval(environment: environment, pid: pid) == .seconds(20))
    }

    @Test(arguments: ["4243", "1", "0", "-4242", "abc", "", " 4242"])
    func pidForAnotherProcessOrGarbageDisables(watchdogPID: String) {
        let environment = ["WATCHDOG_USEC": "20000000", "WATCHDOG_PID": watchdogPID]
        #expect(SystemdNotifier.watchdogInterval(environment: environment, pid: pid) == nil)
    }

    @Test(arguments: ["", "0", "-5", "abc", "1.5", "30s", " 100", "18446744073709551615", "99999999999999999999"])
    func garbageUsecDisables(usec: String) {
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": usec], pid: pid) == nil)
    }

    @Test func absentMeansNoWatchdog() {
        #expect(SystemdNotifier.watchdogInterval(environment: [:], pid: pid) == nil)
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_PID": "4242"], pid: pid) == nil)
    }
}
