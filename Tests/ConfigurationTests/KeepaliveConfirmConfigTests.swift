@testable import Configuration
import Testing

/// `keepalive.confirm_every` as the config reads it (its effect on the
/// supervisor: TetherDaemonTests' `KeepaliveConfirmSettingsTests`).
@Suite struct KeepaliveConfirmConfigTests {
    @Test func aValueThatIsNotADurationIsRefused() {
        let error = configRefusal("[dongle]\naddress = \"aa:bb:cc:dd:ee:ff\"\n[keepalive]\nconfirm_every = \"often\"\n")
        #expect(error?.key == "keepalive.confirm_every")
        #expect(error?.line == 4)
    }
}
