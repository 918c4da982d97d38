import Foundation
import HCI
import TestSupport
import Testing
@testable import TetherDaemon

/// A controller the kernel has but never announced (its set-up failed) is
/// told apart from "no adapter", and from controllers that are merely busy.
@Suite struct ControllerInitCheckTests {
    static func controller(_ index: Int, up: Bool = false, settingUp: Bool = false, address: String = "00:00:00:00:00:00") -> KernelController {
        KernelController(name: "hci\(index)", index: index, up: up, settingUp: settingUp, address: address)
    }

    @Test func aDownControllerThatBluetoothdDoesNotListIsReportedOnceConfirmed() {
        var check = ControllerInitCheck(name: nil, address: nil)
        let kernel = [Self.controller(0)]
        #expect(check.check(kernel: kernel, listed: [], at: .zero) == nil, "not yet: bluetoothd may be reading it")
        #expect(check.check(kernel: kernel, listed: [], at: .seconds(1)) == nil)
        #expect(check.check(kernel: kernel, listed: [], at: .seconds(4)) == .failed(Self.controller(0)))
        #expect(check.check(kernel: kernel, listed: [], at: .seconds(9)) == nil, "said once")
        #expect(ControllerInitCheck.problem(Self.controller(0))
            == "hci0 is present in the kernel but failed its initialisation; bluetoothd cannot use it until it is reset or replugged")
        #expect(check.reset() == .cleared(Self.controller(0)))
    }

    @Test func controllersUpSettingUpOrListedAreNotSuspects() {
        var check = ControllerInitCheck(name: nil, address: nil)
        // An HCI user channel holds hci1 up; hci2 is in its set-up; bluetoothd lists hci0.
        let kernel = [Self.controller(0), Self.controller(1, up: true), Self.controller(2, settingUp: true)]
        for second in [0, 1, 4, 10, 60] {
            #expect(check.check(kernel: kernel, listed: ["hci0"], at: .seconds(second)) == nil)
        }
    }

    @Test func aControllerThatComesUpClearsTheProblem() {
        var check = ControllerInitCheck(name: "hci0", address: nil)
        #expect(check.check(kernel: [Self.controller(0)], listed: [], at: .zero) == nil)
        #expect(check.check(kernel: [Self.controller(0)], listed: [], at: .seconds(3)) == .failed(Self.controller(0)))
        #expect(check.check(kernel: [Self.controller(0, up: true)], listed: [], at: .seconds(8)) == .cleared(Self.controller(0)))
    }

    @Test func onlyTheConfiguredControllerCounts() {
        var byName = ControllerInitCheck(name: "hci1", address: nil)
        #expect(byName.check(kernel: [Self.controller(0)], listed: [], at: .zero) == nil)
        #expect(byName.check(kernel: [Self.controller(0)], listed: [], at: .seconds(10)) == nil)
        // By address: one that failed before reading its address (00:…) may be it; another address is not.
        var byAddress = ControllerInitCheck(name: nil, address: "aa:bb:cc:dd:ee:ff")
        let other = Self.controller(0, address: "11:22:33:44:55:66")
        #expect(byAddress.check(kernel: [other], listed: [], at: .zero) == nil)
        #expect(byAddress.check(kernel: [other], listed: [], at: .seconds(10)) == nil)
        let unknown = Self.controller(1)
        #expect(byAddress.check(kernel: [other, unknown], listed: [], at: .seconds(11)) == nil)
        #expect(byAddress.check(kernel: [other, unknown], listed: [], at: .seconds(14)) == .failed(unknown))
    }

    @Test func theReChecksSlowDownToOnceAMinute() {
        var check = ControllerInitCheck(name: nil, address: nil)
        var delays: [Duration] = []
        for second in 0..<8 {
            _ = check.check(kernel: [], listed: [], at: .seconds(second))
            delays.append(check.nextDelay)
        }
        #expect(delays == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(32), .seconds(60), .seconds(60)])
    }

    @Test func theKernelListSkipsConnectionsAndOddNames() throws {
        // Without /sys/class/bluetooth (this machine's kernel may lack Bluetooth), nothing;
        // with a directory of fakes, only hciN names are candidates and their flags are read
        // from the kernel, which does not know them: none is listed.
        #expect(KernelControllers.list(sysfs: "/nonexistent").isEmpty)
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for name in ["hci0:64", "hciX", "rfkill0"] {
            try "".write(toFile: directory.url.appendingPathComponent(name).path, atomically: true, encoding: .utf8)
        }
        #expect(KernelControllers.list(sysfs: directory.url.path).isEmpty)
    }
}
