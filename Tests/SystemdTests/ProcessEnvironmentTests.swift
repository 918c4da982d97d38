import Foundation
import Systemd
import Testing

@Suite struct ProcessEnvironmentTests {
    /// The same dictionary Foundation reads, for this test process's real
    /// environment (CI's and a developer's both carry values with `=` in
    /// them, such as LS_COLORS or a MAKEFLAGS).
    @Test func readsWhatFoundationReads() {
        #expect(ProcessEnvironment.current() == ProcessInfo.processInfo.environment)
        #expect(ProcessEnvironment.current()["PATH"] == getenv("PATH").map { String(cString: $0) })
    }
}
