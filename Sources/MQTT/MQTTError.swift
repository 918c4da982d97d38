import CMosquitto

/// A failure of the MQTT layer, with libmosquitto's own words for it.
public struct MQTTError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure, for the caller's policy (retry, or tell the
    /// operator which setting to fix).
    public enum Kind: Sendable, Equatable {
        /// The broker answered CONNACK with this refusal code (4: bad user
        /// name or password, 5: not authorised, 2: client id rejected, …).
        case refused(Int32)
        /// The TLS handshake failed (a certificate the CA does not verify,
        /// a client certificate the broker does not accept, …).
        case tls
        /// The connection could not be made or was lost.
        case connection
        /// Anything else libmosquitto refused (a bad argument, out of memory).
        case library
    }

    public var kind: Kind
    /// Why OpenSSL rejected the broker's certificate chain, when that is
    /// why the TLS handshake failed.
    public var certificateRejection: CertificateRejection?
    /// libmosquitto's error code (MOSQ_ERR_*), or the CONNACK code of a refusal.
    public var code: Int32
    public var description: String

    public init(kind: Kind = .library, code: Int32, _ description: String) {
        self.kind = kind
        self.code = code
        self.description = description
    }

    /// From a MOSQ_ERR_* result of `operation`; `detail` is what libmosquitto
    /// logged about it (OpenSSL's reason, for TLS failures).
    static func library(_ code: Int32, _ operation: String, detail: String? = nil) -> MQTTError {
        let kind: Kind = switch code {
        case MOSQ_ERR_TLS.rawValue, MOSQ_ERR_TLS_HANDSHAKE.rawValue: .tls
        case MOSQ_ERR_NO_CONN.rawValue, MOSQ_ERR_CONN_LOST.rawValue, MOSQ_ERR_ERRNO.rawValue, MOSQ_ERR_EAI.rawValue,
             MOSQ_ERR_KEEPALIVE.rawValue, MOSQ_ERR_PROTOCOL.rawValue, MOSQ_ERR_CONN_REFUSED.rawValue: .connection
        default: .library
        }
        var text = "\(operation): \(Mosquitto.describe(code))"
        if let detail, !detail.isEmpty { text += " (\(detail))" }
        return MQTTError(kind: kind, code: code, text)
    }

    /// A CONNACK that refused the connection (a wrong password, a client
    /// id the broker does not accept).
    static func refused(_ code: Int32) -> MQTTError {
        MQTTError(kind: .refused(code), code: code, "the broker refused the connection: \(Mosquitto.describeRefusal(code))")
    }

    /// A refusal of our credentials (CONNACK 4 or 5): the operator's to fix.
    public var isCredentialRefusal: Bool {
        if case .refused(let code) = kind { return code == 4 || code == 5 }
        return false
    }
}
