/// The tables of the config file and the keys each may hold: the one list.
/// The parser rejects every key not listed here (`ConfigSection.rejectUnknownKeys`),
/// and a test checks that the man page, tether.toml(5), documents exactly these,
/// so a key added here without its documentation fails the tests.
public enum ConfigKeys {
    public static let bluez: Set<String> = ["adapter"]
    public static let dongle: Set<String> = [
        "address", "name_prefix", "service_uuid", "notify", "notify_path", "silence_limit", "pairing",
        "passkey_file",
    ]
    public static let keepalive: Set<String> = [
        "enabled", "interval", "characteristic", "write", "write_type", "timeout", "sleep_after", "confirm_every",
    ]
    public static let reconnect: Set<String> = [
        "first_delay", "initial_backoff", "max_backoff", "jitter", "connect_timeout",
        "window", "window_attempts", "cooldown", "escalate", "remove_stale_device",
        "scan_stall_after", "uart_unit",
    ]
    public static let readings: Set<String> = ["directory", "flush_interval", "rotate_size", "retain_size", "max_backlog"]
    public static let mqtt: Set<String> = [
        "url", "topic", "status_topic", "client_id", "qos", "username", "password_file", "ca_file", "cert_file",
        "key_file", "keepalive", "max_inflight", "batch", "allow_cleartext_password",
    ]
    public static let metrics: Set<String> = ["textfile", "forward_textfile", "interval"]
    public static let decode: Set<String> = ["fields", "characteristic"]

    /// Every table with its keys.
    public static let tables: [String: Set<String>] = [
        "bluez": bluez, "dongle": dongle, "keepalive": keepalive, "reconnect": reconnect,
        "readings": readings, "mqtt": mqtt, "metrics": metrics, "decode": decode,
    ]
}
