import CMosquitto
import EventLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One MQTT connection through libmosquitto, driven by an `EventLoop`: its
/// socket is one of the loop's descriptors (read when readable, written
/// while libmosquitto has output queued) and its keep-alive bookkeeping
/// (`mosquitto_loop_misc`) runs on a loop timer a quarter of the MQTT
/// keep-alive apart. libmosquitto's own thread is never started.
///
/// Threading: confined to `loop`; create it, call it and drop it there.
/// Events (`onEvent`) are delivered on the loop, from inside the calls that
/// caused them or from the loop's descriptor handler.
///
/// Invariants: at most one watch, on the current socket; after `close()`
/// there is no watch, no timer and no libmosquitto handle.
public final class MQTTClient {
    public struct Options: Sendable {
        public var host: String
        public var port: Int
        public var clientID: String
        public var username: String?
        /// Read from a file by the caller; never logged.
        public var password: String?
        public var keepalive: Duration
        /// Publishes awaiting their acknowledgement at once (QoS 1).
        public var maxInflight: Int
        public var tls: TLS?
        /// The last will: published by the broker when the connection dies.
        public var will: Message?
        /// Whether the broker keeps the session (and our unacknowledged
        /// messages) across reconnects.
        public var cleanSession: Bool

        public init(
            host: String, port: Int, clientID: String, username: String? = nil, password: String? = nil,
            keepalive: Duration = .seconds(30), maxInflight: Int = 64, tls: TLS? = nil, will: Message? = nil,
            cleanSession: Bool = true
        ) {
            self.host = host
            self.port = port
            self.clientID = clientID
            self.username = username
            self.password = password
            self.keepalive = keepalive
            self.maxInflight = maxInflight
            self.tls = tls
            self.will = will
            self.cleanSession = cleanSession
        }
    }

    public struct TLS: Sendable {
        public var caFile: String
        public var certFile: String?
        public var keyFile: String?
        public init(caFile: String, certFile: String? = nil, keyFile: String? = nil) {
            self.caFile = caFile
            self.certFile = certFile
            self.keyFile = keyFile
        }
    }

    public struct Message: Sendable {
        public var topic: String
        public var payload: [UInt8]
        public var qos: Int32
        public var retain: Bool
        public init(topic: String, payload: [UInt8], qos: Int32 = 1, retain: Bool = false) {
            self.topic = topic
            self.payload = payload
            self.qos = qos
            self.retain = retain
        }
    }

    public enum Event: Sendable, Equatable {
        /// The broker accepted the connection (CONNACK 0).
        case connected
        /// The connection could not be made, was refused, or was lost.
        case disconnected(MQTTError)
        /// The broker acknowledged the publish with this message id (PUBACK
        /// for QoS 1; for QoS 0, once it is written to the socket).
        case published(messageID: Int32)
    }

    public let loop: EventLoop
    public let options: Options
    public var onEvent: ((Event) -> Void)?
    /// libmosquitto's functions, loaded by the first client.
    private let api: UnsafePointer<cmosquitto_api>
    private var handle: OpaquePointer?
    /// Why OpenSSL rejected the broker's certificate in the handshake that
    /// failed last, read while libmosquitto logged the failure.
    private var certificateRejection: CertificateRejection?
    private var watch: EventLoop.WatchID?
    private var watchedSocket: Int32 = -1
    private var miscTimer: EventLoop.TimerID?
    private var connected = false

    /// Prepares the connection (nothing is sent until `connect()`).
    public init(options: Options, loop: EventLoop) throws(MQTTError) {
        loop.checkIsolated()
        let api = try Mosquitto.load()
        self.api = api
        self.loop = loop
        self.options = options
        guard let handle = api.pointee.new_client(options.clientID, options.cleanSession, nil) else {
            throw MQTTError(code: MOSQ_ERR_NOMEM.rawValue, "mosquitto_new failed (out of memory, or an empty client id with a kept session)")
        }
        self.handle = handle
        api.pointee.user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
        api.pointee.connect_callback_set(handle, Self.connectCallback)
        api.pointee.disconnect_callback_set(handle, Self.disconnectCallback)
        api.pointee.publish_callback_set(handle, Self.publishCallback)
        api.pointee.log_callback_set(handle, Self.logCallback)
        do throws(MQTTError) {
            try check(api.pointee.int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311), "protocol version")
            try check(api.pointee.max_inflight_messages_set(handle, UInt32(max(1, options.maxInflight))), "max_inflight")
            if let username = options.username {
                try check(api.pointee.username_pw_set(handle, username, options.password), "username")
            }
            if let tls = options.tls {
                try check(api.pointee.tls_set(handle, tls.caFile, nil, tls.certFile, tls.keyFile, nil), "TLS files")
            }
            if let will = options.will {
                let rc = will.payload.withUnsafeBytes { bytes in
                    api.pointee.will_set(handle, will.topic, Int32(bytes.count), bytes.baseAddress, will.qos, will.retain)
                }
                try check(rc, "last will")
            }
        } catch {
            api.pointee.destroy(handle)
            self.handle = nil
            throw error
        }
    }

    deinit {
        if let handle { api.pointee.destroy(handle) }
    }

    public var isConnected: Bool { connected }

    /// Starts connecting (TCP, then TLS and CONNECT through the loop); the
    /// outcome comes as `.connected` or `.disconnected`. Also reconnects
    /// after a loss. Resolving a host name may block briefly: use addresses
    /// on a gateway where DNS can hang.
    public func connect() throws(MQTTError) {
        loop.checkIsolated()
        guard let handle else { throw MQTTError(code: MOSQ_ERR_INVAL.rawValue, "the client is closed") }
        stopWatching()
        lastLoggedError = nil
        certificateRejection = nil
        let seconds = Int32(clamping: max(5, options.keepalive.components.seconds))
        let rc = connectedBefore
            ? api.pointee.reconnect_async(handle)
            : api.pointee.connect_async(handle, options.host, Int32(options.port), seconds)
        connectedBefore = true
        guard rc == MOSQ_ERR_SUCCESS.rawValue else {
            // The handshake can fail inside connect_async (on loopback the
            // broker's certificate may arrive before it returns).
            throw explained(MQTTError.library(rc, "connect to \(options.host):\(options.port)", detail: lastLoggedError))
        }
        startWatching()
    }

    /// `connect()` ran before: later calls reconnect with the same settings.
    private var connectedBefore = false

    /// The last error libmosquitto logged since `connect()`: kept to explain
    /// the failure it reports next.
    private var lastLoggedError: String?

    /// Queues a message; its id comes back with `.published` once the
    /// broker has it. Throws when libmosquitto refuses (not connected:
    /// MOSQ_ERR_NO_CONN; the payload or topic invalid).
    @discardableResult
    public func publish(_ message: Message) throws(MQTTError) -> Int32 {
        loop.checkIsolated()
        guard let handle else { throw MQTTError(code: MOSQ_ERR_INVAL.rawValue, "the client is closed") }
        var messageID: Int32 = 0
        let rc = message.payload.withUnsafeBytes { bytes in
            api.pointee.publish(handle, &messageID, message.topic, Int32(bytes.count), bytes.baseAddress, message.qos, message.retain)
        }
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw MQTTError.library(rc, "publish to \(message.topic)") }
        updateInterest()
        return messageID
    }

    /// Sends DISCONNECT (the broker then does not publish the will) and
    /// stops watching; `onEvent` is not called for it.
    public func disconnect() {
        loop.checkIsolated()
        guard let handle else { return }
        let handler = onEvent
        onEvent = nil
        _ = api.pointee.disconnect(handle)
        if watchedSocket >= 0 { _ = api.pointee.loop_write(handle, 1) }
        stopWatching()
        connected = false
        onEvent = handler
    }

    /// Disconnects and releases libmosquitto's handle.
    public func close() {
        loop.checkIsolated()
        disconnect()
        onEvent = nil
        if let handle { api.pointee.destroy(handle) }
        handle = nil
    }

    // MARK: The loop's side

    private func startWatching() {
        guard let handle else { return }
        let socket = api.pointee.socket(handle)
        guard socket >= 0 else { return }
        watchedSocket = socket
        watch = loop.watch(socket, interest: interest()) { [unowned self] ready in service(ready) }
        scheduleMisc()
    }

    private func stopWatching() {
        if let watch { loop.removeWatch(watch) }
        watch = nil
        watchedSocket = -1
        if let miscTimer { loop.cancelTimer(miscTimer) }
        miscTimer = nil
    }

    private func interest() -> EventLoop.Readiness {
        guard let handle else { return [] }
        return api.pointee.want_write(handle) ? [.readable, .writable] : [.readable]
    }

    private func updateInterest() {
        guard let watch else { return }
        loop.setInterest(watch, interest())
    }

    private func service(_ ready: EventLoop.Readiness) {
        guard let handle, watch != nil else { return }
        var rc = MOSQ_ERR_SUCCESS.rawValue
        if !ready.intersection([.readable]).isEmpty || !ready.intersection(.hangup).isEmpty {
            rc = api.pointee.loop_read(handle, 64)
        }
        if rc == MOSQ_ERR_SUCCESS.rawValue, watch != nil, ready.contains(.writable) || api.pointee.want_write(handle) {
            rc = api.pointee.loop_write(handle, 64)
        }
        if rc != MOSQ_ERR_SUCCESS.rawValue {
            return lost(MQTTError.library(rc, "connection to \(options.host):\(options.port)"))
        }
        updateInterest()
    }

    /// libmosquitto's keep-alive (PINGREQ, and the broker's silence as a
    /// loss) needs `loop_misc` now and then: a quarter of the keep-alive.
    private func scheduleMisc() {
        let period = max(Duration.seconds(1), options.keepalive / 4)
        miscTimer = loop.schedule(after: period) { [unowned self] in
            miscTimer = nil
            guard let handle, watch != nil else { return }
            let rc = api.pointee.loop_misc(handle)
            if rc != MOSQ_ERR_SUCCESS.rawValue {
                return lost(MQTTError.library(rc, "keep-alive with \(options.host):\(options.port)"))
            }
            updateInterest()
            scheduleMisc()
        }
    }

    private func lost(_ error: MQTTError) {
        var error = error
        // libmosquitto says "A TLS error occurred."; its log has OpenSSL's
        // reason ("certificate verify failed"), which names what to fix.
        if let detail = lastLoggedError, !error.description.contains(detail) {
            error.description += " (\(detail))"
            if error.kind == .connection, detail.contains("OpenSSL") || detail.contains("SSL") { error.kind = .tls }
        }
        lastLoggedError = nil
        error = explained(error)
        let wasWatching = watch != nil
        stopWatching()
        connected = false
        if wasWatching { onEvent?(.disconnected(error)) }
    }

    /// OpenSSL's queue says only "certificate verify failed"; the verify
    /// result kept while libmosquitto logged it says why (a certificate not
    /// valid yet at a clock that reads 1970 is not the CA file's fault).
    private func explained(_ error: MQTTError) -> MQTTError {
        guard let rejection = certificateRejection else { return error }
        certificateRejection = nil
        var error = error
        error.kind = .tls
        error.certificateRejection = rejection
        if !error.description.contains(rejection.text) { error.description += ": \(rejection.text)" }
        return error
    }

    private func check(_ rc: Int32, _ what: String) throws(MQTTError) {
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw MQTTError.library(rc, what) }
    }

    // MARK: libmosquitto's callbacks (on the loop, inside loop_read/write/misc)

    private static func client(_ data: UnsafeMutableRawPointer?) -> MQTTClient? {
        data.map { Unmanaged<MQTTClient>.fromOpaque($0).takeUnretainedValue() }
    }

    private static let connectCallback: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32) -> Void = {
        _, data, code in
        guard let client = client(data) else { return }
        if code == 0 {
            client.connected = true
            client.onEvent?(.connected)
        } else {
            client.lost(.refused(code))
        }
    }

    private static let disconnectCallback: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32) -> Void = {
        _, data, code in
        guard let client = client(data), client.watch != nil else { return }
        client.lost(MQTTError.library(code, "the connection to \(client.options.host):\(client.options.port) closed"))
    }

    /// Only errors are kept; libmosquitto logs nothing else we need.
    private static let logCallback: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, UnsafePointer<CChar>?) -> Void = {
        _, data, level, text in
        guard level & MOSQ_LOG_ERR != 0, let text, let client = client(data) else { return }
        let line = String(cString: text)
        // A TLS failure is logged before the connection (and its SSL object,
        // which holds the certificate check's result) is freed.
        if line.hasPrefix("OpenSSL Error"), client.options.tls != nil, let handle = client.handle,
           let connection = client.api.pointee.ssl_get(handle),
           let rejection = CertificateRejection(cmosquitto_tls_verify_failure(connection)) {
            client.certificateRejection = rejection
        }
        // OpenSSL's queue comes first-to-last; the first entry is the cause.
        if client.lastLoggedError == nil || !line.hasPrefix("OpenSSL Error[") || line.hasPrefix("OpenSSL Error[0]") {
            client.lastLoggedError = line
        }
    }

    private static let publishCallback: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32) -> Void = {
        _, data, messageID in
        client(data)?.onEvent?(.published(messageID: messageID))
    }
}
