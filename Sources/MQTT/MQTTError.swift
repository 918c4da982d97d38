import CMosquitto

/// A failure of the MQTT layer, with libmosquitto's own words for it.
public struct MQTTError: Error, Sendable, Equatable, CustomStringConvertible {
    /// libmosquitto's error code (MOSQ_ERR_*), or a CONNACK reason code for
    /// a refused connection.
    public var code: Int32
    public var description: String

    public init(code: Int32, _ description: String) {
        self.code = code
        self.description = description
    }

    /// From a MOSQ_ERR_* result of `operation`.
    static func library(_ code: Int32, _ operation: String) -> MQTTError {
        MQTTError(code: code, "\(operation): \(String(cString: mosquitto_strerror(code)))")
    }

    /// A CONNACK that refused the connection (a wrong password, a client
    /// id the broker does not accept).
    static func refused(_ code: Int32) -> MQTTError {
        MQTTError(code: code, "the broker refused the connection: \(String(cString: mosquitto_connack_string(code)))")
    }
}
