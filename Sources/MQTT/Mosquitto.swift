import CMosquitto

/// libmosquitto, loaded at the first MQTT client (`tether forward`) rather
/// than linked into every process: `tether run` never maps it, nor the
/// libssl and libcrypto it needs.
enum Mosquitto {
    /// The function table (loaded once); a clear error when the library is missing.
    static func load() throws(MQTTError) -> UnsafePointer<cmosquitto_api> {
        var error = [CChar](repeating: 0, count: 320)
        guard let api = cmosquitto_load(&error, UInt(error.count)) else {
            let text = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw MQTTError(code: MOSQ_ERR_NOT_SUPPORTED.rawValue, text)
        }
        return api
    }

    /// libmosquitto's text for a MOSQ_ERR_* code.
    static func describe(_ code: Int32) -> String {
        guard let api = cmosquitto_loaded(), let text = api.pointee.strerror(code) else { return "error \(code)" }
        return String(cString: text)
    }

    /// libmosquitto's text for a CONNACK refusal code.
    static func describeRefusal(_ code: Int32) -> String {
        guard let api = cmosquitto_loaded(), let text = api.pointee.connack_string(code) else { return "refusal \(code)" }
        return String(cString: text)
    }
}
