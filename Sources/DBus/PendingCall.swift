import CDBus
import EventLoop

/// Why a method call is refused before its body is read: the D-Bus error it is answered with.
struct CallRefusal: Error, Equatable {
    var name: String
    var text: String
}

/// One method call in flight, known to its connection by the serial its
/// reply will name. Touched only on the connection's loop.
final class PendingCall {
    let serial: UInt32
    /// The loop timer that fails the call with `.timeout`.
    let timeout: EventLoop.TimerID
    private weak var connection: Connection?
    private var completion: ((Result<Message, DBusError>) -> Void)?

    init(
        serial: UInt32, timeout: EventLoop.TimerID, connection: Connection,
        completion: @escaping (Result<Message, DBusError>) -> Void
    ) {
        self.serial = serial
        self.timeout = timeout
        self.connection = connection
        self.completion = completion
    }

    /// Completes the call with `reply`, a method return or an error naming
    /// its serial (the connection has checked the type).
    func complete(with reply: OpaquePointer) {
        guard case let (message, bodyError)? = Message.copy(from: reply) else {
            finish(.failure(.malformed("the reply is of an unknown message type \(dbus_message_get_type(reply))")))
            return
        }
        if message.kind == .error {
            let name = message.errorName ?? DBusErrorName.failed
            if name == DBusErrorName.noReply {
                // The bus daemon's word for a callee that left without answering.
                finish(.failure(.timeout))
            } else if name == DBusErrorName.disconnected {
                finish(.failure(.disconnected))
            } else {
                finish(.failure(.remote(name: name, message: message.firstString)))
            }
        } else if let bodyError {
            finish(.failure(bodyError))
        } else {
            finish(.success(message))
        }
    }

    /// Abandons the call; the completion sees `error`, and a reply that
    /// comes later is dropped.
    func cancel(with error: DBusError) {
        guard let connection else { return finish(.failure(error)) }
        connection.settle(serial) { $0.finish(.failure(error)) }
    }

    /// Runs the completion, once: later calls do nothing.
    func finish(_ result: Result<Message, DBusError>) {
        let callback = completion
        completion = nil
        callback?(result)
    }
}
