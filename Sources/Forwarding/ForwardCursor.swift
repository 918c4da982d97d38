import Configuration
import DurableFile

/// The forwarder's durable position: the last `seq` the broker acknowledged.
/// Stored as one decimal line in a file of its own, replaced atomically
/// (written to a temporary file, fsynced, renamed, the directory fsynced),
/// so that a crash leaves the old value or the new one, never a torn one.
public struct ForwardCursor: Sendable {
    public let path: String

    public init(path: String) { self.path = path }

    /// The cursor of `instance`'s forwarder in `stateDirectory`.
    public init(stateDirectory: String, instance: InstanceName) {
        path = stateDirectory + "/" + (instance == .default ? "cursor" : "\(instance).cursor")
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The stored seq; 0 when there is no file yet (nothing delivered).
    public func load() throws(Failure) -> UInt64 {
        let bytes: [UInt8]
        do throws(SmallFile.Failure) {
            guard let read = try SmallFile.read(path, limit: 32) else { return 0 }
            bytes = read
        } catch {
            throw Failure(description: "\(path): cannot read the forwarding cursor: \(error.reason)")
        }
        guard !bytes.isEmpty else { throw Failure(description: "\(path): the forwarding cursor is empty") }
        let text = String(decoding: bytes, as: UTF8.self).trimmingTrailingNewline
        guard let seq = UInt64(text) else {
            throw Failure(description: "\(path): the forwarding cursor holds \(text.debugDescription), not a seq; remove it to forward everything again")
        }
        return seq
    }

    /// Stores `seq` durably.
    public func store(_ seq: UInt64) throws(Failure) {
        do throws(SmallFile.Failure) {
            try SmallFile.replace(path, with: Array("\(seq)\n".utf8), durable: true)
        } catch {
            throw Failure(description: "cannot \(error.operation) (the forwarding cursor): \(error.reason)")
        }
    }
}

extension String {
    var trimmingTrailingNewline: String {
        var text = Substring(self)
        while let last = text.last, last == "\n" || last == "\r" || last == " " { text = text.dropLast() }
        return String(text)
    }
}
