import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A Unix file descriptor carried by a D-Bus message (type `h`), owned by
/// this object until someone takes it.
///
/// Invariants: the descriptor is closed exactly once, by `deinit`, unless
/// `take()` handed it over first; after `take()` the object holds nothing.
/// So a message carrying a descriptor that nobody takes (an unexpected
/// reply, a signal that no handler wants) cannot leak it.
///
/// Equality is identity: two objects never own the same descriptor.
public final class UnixFileDescriptor: Sendable, Hashable, CustomStringConvertible {
    private let owned: Mutex<Int32?>

    /// Takes ownership of `descriptor`.
    public init(owning descriptor: Int32) {
        owned = Mutex(descriptor >= 0 ? descriptor : nil)
    }

    deinit {
        if let descriptor = owned.withLock({ $0 }) { close(descriptor) }
    }

    /// Hands the descriptor over to the caller, who must close it; nil if it
    /// was already taken.
    public func take() -> Int32? {
        owned.withLock { value in
            defer { value = nil }
            return value
        }
    }

    /// The descriptor, still owned here (for sending: libdbus duplicates it).
    public var borrowed: Int32? { owned.withLock { $0 } }

    public static func == (a: UnixFileDescriptor, b: UnixFileDescriptor) -> Bool { a === b }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    public var description: String {
        borrowed.map { "fd \($0)" } ?? "fd (taken)"
    }
}
