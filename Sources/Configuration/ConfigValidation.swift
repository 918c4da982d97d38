import LinkPolicy

extension TetherConfig {
    /// Cross-field and range checks that individual typed reads cannot make.
    /// When a rule involves two keys, the error names the one actually in the file,
    /// preferring the first, so the line number points at something to edit.
    func validate(context: ConfigContext) throws(ConfigError) {
        func blame(_ preferred: String, _ other: String) -> String {
            context.locator.line(of: preferred) != nil || context.locator.line(of: other) == nil ? preferred : other
        }
        func fail(_ key: String, _ message: String) -> ConfigError { context.error(key, message) }
        let f = DurationText.format

        let k = keepalive
        guard k.interval > .zero else { throw fail("keepalive.interval", "must be greater than 0s") }
        guard k.timeout > .zero else { throw fail("keepalive.timeout", "must be greater than 0s") }
        guard k.timeout <= k.interval else {
            throw fail(blame("keepalive.timeout", "keepalive.interval"),
                       "keepalive.timeout (\(f(k.timeout))) must not exceed keepalive.interval (\(f(k.interval)))")
        }
        // Polling at most every sleep_after/2 leaves a whole poll of slack before the dongle dozes off.
        guard k.interval <= k.sleepAfter / 2 else {
            throw fail(blame("keepalive.interval", "keepalive.sleep_after"),
                       "keepalive.interval (\(f(k.interval))) must be at most half of keepalive.sleep_after (\(f(k.sleepAfter))), i.e. at most \(f(k.sleepAfter / 2))")
        }

        // A read poll needs a readable characteristic; NUS RX, the default, is write-only.
        if k.enabled, k.write == nil, k.characteristic == ConfigUUID.nusRX {
            throw fail(blame("keepalive.write", "keepalive.characteristic"),
                       "polling with a read (write = \"\") needs keepalive.characteristic set to a readable characteristic; \(ConfigUUID.nusRX) (NUS RX) is write-only")
        }

        // bluetoothd announces a read's value as it announces a notification
        // (PropertiesChanged "Value", src/gatt-client.c): each poll would be
        // logged as a reading, and the radio stack's answer would keep a
        // hung dongle's link `online`. Through an acquired socket only
        // notifications arrive, so there the two cannot be confused.
        if k.enabled, k.write == nil, dongle.notifyPath != .acquireNotify,
           dongle.notify.contains(where: { $0.lowercased() == k.characteristic.lowercased() }) {
            throw fail(blame("keepalive.characteristic", "keepalive.write"),
                       "polling with a read (write = \"\") of \(k.characteristic), which dongle.notify subscribes to: bluetoothd announces a read's value as it announces a notification, so every poll would be logged as a reading and would keep a hung dongle online; poll another readable characteristic, write to one (keepalive.write), or set dongle.notify_path = \"acquire-notify\"")
        }

        // A dongle that notifies only in answer to a poll is silent between two polls.
        if k.enabled, case .after(let limit) = dongle.silenceLimit, limit < k.interval {
            throw fail(blame("dongle.silence_limit", "keepalive.interval"),
                       "dongle.silence_limit (\(f(limit))) is shorter than keepalive.interval (\(f(k.interval))): a dongle that notifies when polled would be taken for dead between two polls; make it at least \(f(k.interval * 2)), or \"off\"")
        }

        let r = reconnect
        guard r.jitter >= 0, r.jitter < 1 else { throw fail("reconnect.jitter", "must be at least 0 and less than 1, got \(r.jitter)") }
        guard r.initialBackoff <= r.maxBackoff else {
            throw fail(blame("reconnect.initial_backoff", "reconnect.max_backoff"),
                       "reconnect.initial_backoff (\(f(r.initialBackoff))) must not exceed reconnect.max_backoff (\(f(r.maxBackoff)))")
        }
        guard r.connectTimeout > .zero else { throw fail("reconnect.connect_timeout", "must be greater than 0s") }
        guard r.window > .zero else { throw fail("reconnect.window", "must be greater than 0s") }
        guard r.windowAttempts >= 1 else { throw fail("reconnect.window_attempts", "must be at least 1, got \(r.windowAttempts)") }
        guard r.cooldown > .zero else { throw fail("reconnect.cooldown", "must be greater than 0s") }
        // Others' advertisements are told every 10 s at most: a shorter
        // bound would call a working scan stalled.
        guard r.scanStallAfter >= .seconds(30) else {
            throw fail("reconnect.scan_stall_after", "must be at least 30s, got \(f(r.scanStallAfter))")
        }

        let s = readings
        let minimumRotate: Int64 = 4 << 10
        guard s.rotateSize >= minimumRotate else {
            throw fail("readings.rotate_size", "must be at least \(ByteSizeText.format(minimumRotate)), got \(ByteSizeText.format(s.rotateSize))")
        }
        guard s.retainSize >= s.rotateSize else {
            throw fail(blame("readings.retain_size", "readings.rotate_size"),
                       "readings.retain_size (\(ByteSizeText.format(s.retainSize))) must be at least readings.rotate_size (\(ByteSizeText.format(s.rotateSize)))")
        }
        // Each waiting reading costs a few hundred bytes of memory: ten million is gigabytes.
        guard s.maxBacklog >= 1, s.maxBacklog <= 10_000_000 else {
            throw fail("readings.max_backlog", "must be between 1 and 10000000, got \(s.maxBacklog)")
        }
        guard s.flushInterval > .zero, s.flushInterval <= .seconds(3600) else {
            throw fail("readings.flush_interval", "must be greater than 0s and at most 1h, got \(f(s.flushInterval))")
        }
    }
}

extension TetherConfig {
    /// Settings that are valid but likely to misbehave, located like errors.
    func warnings(context: ConfigContext) -> [ConfigError] {
        let f = DurationText.format
        var warnings: [ConfigError] = []
        switch dongle.silenceLimit {
        case .off:
            warnings.append(context.error("dongle.silence_limit",
                "\"off\": a dongle whose application hangs while its radio keeps the link will show as online with no data arriving"))
        case .after(let limit) where keepalive.enabled && limit < keepalive.interval * 2:
            warnings.append(context.error("dongle.silence_limit",
                "\(f(limit)) is less than two keep-alive intervals (\(f(keepalive.interval * 2))): one lost answer to a poll would count as a hung dongle"))
        default:
            break
        }
        return warnings
    }
}
