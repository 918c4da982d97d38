import CMosquitto

/// Why OpenSSL rejected the broker's certificate chain during the TLS
/// handshake (its X509_V_ERR_* verify result), so that the forwarder can
/// tell a clock that is wrong from a certificate that is.
public struct CertificateRejection: Sendable, Equatable {
    public enum Reason: Sendable, Equatable {
        /// A certificate of the chain is not valid yet at the system
        /// clock's reading: on a gateway, almost always a clock that has
        /// not been set since boot (1970, or the last shutdown's time).
        case notYetValid
        /// A certificate of the chain has expired at the clock's reading.
        case expired
        /// Anything else: an unknown CA, a wrong host name, a bad signature.
        case other
    }

    public var reason: Reason
    /// OpenSSL's X509_V_ERR_* code.
    public var code: Int
    /// OpenSSL's words for it ("certificate is not yet valid").
    public var text: String

    public init(reason: Reason, code: Int, text: String) {
        self.reason = reason
        self.code = code
        self.text = text
    }

    /// From the shim's record; nil when nothing was rejected.
    init?(_ failure: cmosquitto_verify_failure) {
        let reason: Reason
        switch failure.reason {
        case cmosquitto_verify_not_yet_valid: reason = .notYetValid
        case cmosquitto_verify_expired: reason = .expired
        case cmosquitto_verify_other: reason = .other
        default: return nil
        }
        self.init(reason: reason, code: failure.code, text: failure.text.map { String(cString: $0) } ?? "verify error \(failure.code)")
    }
}
