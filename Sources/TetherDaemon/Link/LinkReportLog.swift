import ControlAPI
import DurationUnits
import FoundationEssentials
import Pacing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import LinkPolicy
import LinkSupervisor
import Logging
import TextColumns

/// The daemon's account of what the supervisor decided: one log line per
/// transition and report, with journald fields (TETHER_EVENT, TETHER_STATE,
/// TETHER_DEVICE…), so `journalctl TETHER_EVENT=disconnected` finds every drop.
struct LinkReportLog: Sendable {
    let logger: Logger
    /// How Tether pairs (`dongle.pairing`), named in the `paired` line.
    var pairingMethod = "just-works"
    /// The wall clock, for the clock time a line names (`dongleAway`).
    var wallClock: @Sendable () -> Date = { Date() }

    /// Seconds with millisecond precision, for machine-read fields.
    static func seconds(_ duration: Duration) -> String {
        FixedPoint.text(Double(duration.wholeMilliseconds) / 1000, digits: 3)
    }

    func transition(from: SupervisorState, to: SupervisorState, cause: String, device: String?) {
        var metadata: Logger.Metadata = ["state": "\(to.rawValue)", "event": "state-changed"]
        if let device { metadata["device"] = "\(device)" }
        logger.info("\(from.rawValue) → \(to.rawValue): \(cause)", metadata: metadata)
    }

    /// A drop, at the moment it is noticed, with why the kernel or
    /// bluetoothd says it happened (the `reason` field), or that the reason
    /// is to follow from `toFollowFrom` (`reason=pending`; a
    /// `disconnect-reason` line brings it, `dropReason`), or, when it is
    /// unavailable, `why` not.
    func disconnected(
        unexpected: Bool, reason: String?, toFollowFrom source: String? = nil, why: String?, state: SupervisorState,
        device: String?
    ) {
        var metadata: Logger.Metadata = ["event": "disconnected", "state": "\(state.rawValue)", "reason": "\(reason ?? "pending")"]
        if let device { metadata["device"] = "\(device)" }
        let text = switch reason {
        case nil: "reason to follow from \(source ?? "bluetoothd")"
        case DisconnectReasons.Reason.unavailable.rawValue?: "reason unavailable\(why.map { ": \($0)" } ?? "")"
        case let reason?: "reason: \(reason)"
        }
        if unexpected {
            logger.warning("link lost (\(text))", metadata: metadata)
        } else {
            logger.info("disconnected (\(text))", metadata: metadata)
        }
    }

    /// The reason of the drop logged at `droppedAt` (wall clock), heard
    /// after that drop's line: its own line, in the order it came.
    func dropReason(_ reason: String, why: String?, droppedAt: Date, state: SupervisorState, device: String?) {
        var metadata: Logger.Metadata = ["event": "disconnect-reason", "state": "\(state.rawValue)", "reason": "\(reason)"]
        if let device { metadata["device"] = "\(device)" }
        let when = LinkStatus.clockTime(droppedAt)
        if reason == DisconnectReasons.Reason.unavailable.rawValue {
            logger.info("the link lost at \(when): reason unavailable\(why.map { ": \($0)" } ?? "")", metadata: metadata)
        } else {
            logger.info("the link lost at \(when): reason \(reason)", metadata: metadata)
        }
    }

    /// - Parameter missing: configured characteristics the connected dongle
    ///   does not export, to explain an attempt that timed out waiting for them.
    /// - Parameter now: the supervisor's clock, to put its times on the wall clock.
    func report(_ report: SupervisorReport, state: SupervisorState, device: String?, missing: [String]?, at now: Duration = .zero) {
        var metadata: Logger.Metadata = ["event": "\(report.eventName)", "state": "\(state.rawValue)"]
        if let device { metadata["device"] = "\(device)" }
        func with(_ extra: Logger.Metadata) -> Logger.Metadata { metadata.merging(extra) { $1 } }
        switch report {
        case .connected(let attempt):
            logger.notice("online\(device.map { " with \($0)" } ?? "")", metadata: with(["attempt": "\(attempt)"]))
        case .disconnected(let unexpected):
            disconnected(unexpected: unexpected, reason: DisconnectReasons.Reason.unavailable.rawValue, why: nil, state: state, device: device)
        case .reconnectAttempt(let attempt, let blind):
            logger.info("\(blind ? "blind " : "")connect attempt \(attempt)", metadata: with(["attempt": "\(attempt)"]))
        case .attemptFailed(let attempt, var error):
            if let missing, !missing.isEmpty, !error.contains("not found on the dongle") {
                error += " (not found on the dongle: \(missing.joined(separator: ", ")))"
            }
            logger.warning("attempt \(attempt) failed: \(error)", metadata: with(["attempt": "\(attempt)", "error": "\(error)"]))
        case .windowExhausted(let attempts):
            logger.error("retry window exhausted after \(attempts) attempts", metadata: with(["attempt": "\(attempts)"]))
        case .escalation(let step, let outcome):
            logger.warning("\(step.rawValue): \(outcome)", metadata: metadata)
        case .bluezVanished:
            logger.warning("bluetoothd went away", metadata: metadata)
        case .bluezAppeared:
            logger.notice("bluetoothd is back", metadata: metadata)
        case .adapterUnavailable:
            logger.warning("adapter unavailable: waiting for it to be powered", metadata: metadata)
        case .discoveryFailed(let error):
            logger.warning("discovery failed: \(error); retrying", metadata: with(["error": "\(error)"]))
        case .adapterLeftOff:
            logger.error("the adapter is still off after an escalation; powering it on again", metadata: metadata)
        case .silence(let silentFor, let limit, let proven):
            let what = proven
                ? "no notification for \(silentFor.roundedText) (silence limit \(limit.roundedText)): the dongle's application seems hung while its radio keeps the link; disconnecting"
                : "no notification within \(silentFor.roundedText) of subscribing (silence limit \(limit.roundedText)); disconnecting"
            logger.warning("\(what)", metadata: with([
                "silent_for": "\(Self.seconds(silentFor))", "silence_limit": "\(Self.seconds(limit))",
            ]))
        case .staleDeviceRemoved(let failures, let lastError):
            logger.warning(
                "\(failures) attempts of the retry window failed with errors that point at a stale device object in bluetoothd (last: \(lastError)); removing it (Adapter1.RemoveDevice) and discovering the dongle again",
                metadata: with(["error": "\(lastError)"])
            )
        case .staleDeviceRemovalFailed(let error):
            logger.warning("removing the stale device object failed: \(error)", metadata: with(["error": "\(error)"]))
        case .radioBlocked(.hard):
            logger.error("the adapter is blocked by a hardware switch (rfkill hard block): waiting for it to lift, no attempts meanwhile", metadata: with(["rfkill": "hard"]))
        case .radioBlocked:
            logger.error("the adapter is blocked by rfkill (soft block): \"rfkill unblock bluetooth\" clears it, or \"rfkill-unblock\" in reconnect.escalate lets Tether do it", metadata: with(["rfkill": "soft"]))
        case .controllerUnresponsive(let detail):
            logger.error(
                "the controller does not answer (\(detail)): attempts end; the escalation steps but power-cycle (which goes through it) run, or a cooldown when there are none", metadata: with(["error": "\(detail)"]))
        case .controllerSlow(let detail, let heardAgo):
            logger.warning(
                "the controller did not answer in time (\(detail)), but other devices' advertisements came through it \(heardAgo.roundedText) ago: it works; asking again at the next check, no step",
                metadata: with(["error": "\(detail)"]))
        case .radioUnblocked:
            logger.notice("the rfkill block on the adapter lifted", metadata: with(["rfkill": "none"]))
        case .adapterNotRecovered(let rounds, let problem, let retryIn):
            logger.error(
                "adapter recovery round \(rounds) did not bring the adapter back (\(problem)); next round in \(retryIn.roundedText)",
                metadata: with(["rounds": "\(rounds)", "retry_in": "\(Self.seconds(retryIn))"])
            )
        case .paired:
            logger.notice("paired with the dongle (\(pairingMethod)) and marked it trusted", metadata: with(["method": "\(pairingMethod)"]))
        case .pairingFailed(let error, unauthenticated: true):
            logger.error(
                "pairing did not authenticate the dongle: \(error); the bond is removed (Adapter1.RemoveDevice) and the link not used",
                metadata: with(["error": "\(error)", "unauthenticated": "true"]))
        case .pairingFailed(let error, _):
            logger.warning("pairing failed: \(error)", metadata: with(["error": "\(error)"]))
        case .bondLost(let detail, let repairing, let why):
            if repairing {
                logger.error(
                    "the dongle refuses its bond (\(detail)): it has lost its keys; removing the device and its keys from bluetoothd (Adapter1.RemoveDevice) to pair again, once in this outage",
                    metadata: with(["repairing": "true", "error": "\(detail)"]))
            } else {
                logger.error(
                    "the dongle refuses its bond (\(detail)); not pairing again: \(why ?? "")",
                    metadata: with(["repairing": "false", "error": "\(detail)"]))
            }
        case .dongleAway(let lastSeen, let evidence):
            let seen = lastSeen.map { seen -> String in
                let ago = now - seen
                let date = wallClock().addingTimeInterval(-Double(ago.components.seconds))
                return "not seen since \(LinkStatus.clockTime(date)) (\(ago.roundedText) ago)"
            } ?? "not seen since Tether started"
            logger.notice(
                "away: \(seen); connects find nobody and \(evidence), so this is no fault: no controller step, connecting as soon as it advertises",
                metadata: with(["evidence": "\(evidence)"] .merging(lastSeen.map { ["away_for": "\(Self.seconds(now - $0))"] } ?? [:]) { $1 }))
        case .dongleBack(let awayFor):
            logger.notice("back: the dongle advertises again after \(awayFor.roundedText) away; connecting", metadata: with(["away_for": "\(Self.seconds(awayFor))"]))
        case .scanStalled(let silentFor, let restarting):
            let what = restarting
                ? "the scan stalled: it heard other devices, and nobody for \(silentFor.roundedText) (bluetoothd still says Discovering); starting discovery again"
                : "the scan still hears nobody (\(silentFor.roundedText)) after discovery was started again; taking the controller steps"
            logger.warning("\(what)", metadata: with(["silent_for": "\(Self.seconds(silentFor))", "restarting": "\(restarting)"]))
        case .linkCheckFailed(let consecutive, let error):
            logger.warning("keep-alive poll failed (\(consecutive) in a row): \(error)", metadata: with(["error": "\(error)"]))
        }
    }
}
