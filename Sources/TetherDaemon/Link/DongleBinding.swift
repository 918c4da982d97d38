import Configuration
import DurableFile
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The dongle a gateway is bound to, when the config finds it by
/// `dongle.name_prefix` or `dongle.service_uuid` (one config for a whole
/// fleet): its address, taken on the first link and kept in the readings
/// directory (the service's state directory), across restarts and upgrades.
/// While bound, Tether connects to no other device, however strong: an
/// identical dongle of another vehicle parked alongside matches the config
/// just as well. `tether rebind` (the control API's `Rebind`) forgets it.
///
/// The file, `dongle-binding`, holds the address and a newline; it is
/// replaced atomically and durably, like the forwarder's cursor.
struct DongleBinding: Sendable, Equatable {
    /// Upper-case `AA:BB:CC:DD:EE:FF`.
    let address: String

    init?(address: String) {
        guard let normalized = BluetoothAddressText.normalize(address) else { return nil }
        self.address = normalized
    }

    static func path(inReadingsDirectory directory: String) -> String { directory + "/dongle-binding" }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// The stored binding; nil when there is none.
    static func load(from path: String) throws(Failure) -> DongleBinding? {
        let bytes: [UInt8]
        do throws(SmallFile.Failure) {
            guard let read = try SmallFile.read(path, limit: 64) else { return nil }
            bytes = read
        } catch {
            throw Failure(description: "\(path): cannot read the dongle binding: \(error.reason)")
        }
        var text = String(decoding: bytes, as: UTF8.self)
        while text.last == "\n" || text.last == " " { text.removeLast() }
        guard let binding = DongleBinding(address: text) else {
            throw Failure(description: "\(path) holds \(text.debugDescription), not a Bluetooth address; `tether rebind` or removing it lets Tether bind anew")
        }
        return binding
    }

    func store(to path: String) throws(Failure) {
        do throws(SmallFile.Failure) {
            try SmallFile.replace(path, with: Array((address + "\n").utf8), durable: true, mode: 0o640)
        } catch {
            throw Failure(description: "cannot store the dongle binding in \(path): \(error.reason)")
        }
    }

    /// Forgets the stored binding (no file is no binding).
    static func remove(at path: String) throws(Failure) {
        guard unlink(path) == 0 || errno == ENOENT else {
            throw Failure(description: "cannot remove \(path): \(String(cString: strerror(errno)))")
        }
    }
}
