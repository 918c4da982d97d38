@testable import LinkSupervisor
import Testing

/// `keepaliveConfirmEvery`: a write command's polls wait for bluetoothd's
/// answer only now and then, and go out without asking for one in between.
@Suite struct PollWithoutReplyTests {
    static let settings: Supervisor.Settings = {
        var settings = Supervisor.Settings(
            policy: SupervisorTests.policy, keepaliveInterval: .seconds(1), keepaliveTimeout: .milliseconds(800)
        )
        settings.keepaliveConfirmEvery = .seconds(5)
        return settings
    }()

    /// The times of answered polls and of polls sent without a reply.
    static func polls(_ link: VirtualLink) -> (answered: [Duration], unanswered: [Duration]) {
        var answered: [Duration] = [], unanswered: [Duration] = []
        for entry in link.log {
            switch entry.action {
            case .poll: answered.append(entry.time)
            case .pollWithoutReply: unanswered.append(entry.time)
            default: break
            }
        }
        return (answered, unanswered)
    }

    func onlineLink(settings: Supervisor.Settings = settings) -> VirtualLink {
        var link = VirtualLink(settings: settings)
        link.connectResult = .success(())
        link.observe(VirtualLink.down)
        #expect(link.state == .online)
        return link
    }

    @Test func oneInEveryConfirmIntervalWaitsAndTheRestGoWithoutAReply() {
        var link = onlineLink()
        link.advance(by: .seconds(20))
        let polls = Self.polls(link)
        #expect(polls.answered == [0, 5, 10, 15, 20].map { Duration.seconds($0) })
        #expect(polls.unanswered == (1...19).filter { $0 % 5 != 0 }.map { Duration.seconds($0) })
        // Nothing to judge for a poll that asks for no answer: no deadline
        // is armed for it, and none is left pending.
        let deadlines = link.log.filter { $0.action == .startTimer(.pollDeadline, after: .milliseconds(800)) }.map(\.time)
        #expect(deadlines == polls.answered)
        #expect(link.state == .online)
    }

    @Test func withoutAConfirmIntervalEveryPollWaits() {
        var settings = Self.settings
        settings.keepaliveConfirmEvery = nil
        var link = onlineLink(settings: settings)
        link.advance(by: .seconds(10))
        let polls = Self.polls(link)
        #expect(polls.answered == (0...10).map { Duration.seconds($0) })
        #expect(polls.unanswered.isEmpty)
    }

    /// A new link starts with an answered poll: a write bluetoothd refuses
    /// on it shows at once, not up to `confirmEvery` later.
    @Test func theFirstPollOfEveryLinkWaitsForItsAnswer() {
        var link = onlineLink()
        link.advance(by: .milliseconds(2500))
        link.clearLog()
        link.observe(VirtualLink.down)  // dropped; the link comes back within seconds
        link.advance(by: .seconds(20))
        let online = link.log.first { if case .transition(_, .online, _) = $0.action { true } else { false } }?.time
        let polls = Self.polls(link)
        #expect(online != nil && polls.answered.first == online, "online at \(String(describing: online)), answered \(polls.answered)")
        if let online {
            #expect(polls.unanswered.first == online + .seconds(1))
        }
    }

    /// Only answered polls count as link checks: two of them failing in a
    /// row force a reconnect, whatever went out without a reply between.
    @Test func twoFailedAnsweredPollsInARowForceAReconnect() {
        var link = onlineLink()
        link.pollResult = .failure(LinkFailure(.transient, "org.bluez.Error.NotPermitted: Write acquired"))
        link.advance(by: .seconds(9))
        #expect(link.log.contains { $0.action == .report(.linkCheckFailed(consecutive: 1, error: "org.bluez.Error.NotPermitted: Write acquired")) })
        #expect(link.count { $0 == .disconnect } == 0)
        link.advance(by: .seconds(1))
        #expect(link.count { $0 == .disconnect } == 1)
        #expect(link.state == .backingOff)
    }

    /// An answered poll that bluetoothd never answers fails at its
    /// timeout, as every poll did before; the next second's poll goes out
    /// without a reply as planned.
    @Test func anAnsweredPollThatGetsNoAnswerFailsAtItsTimeout() {
        var link = onlineLink()
        link.advance(by: .seconds(4))
        link.pollResult = nil
        link.advance(by: .seconds(2))
        #expect(link.log.contains { $0.time == .milliseconds(5800) && $0.action == .report(.linkCheckFailed(consecutive: 1, error: "no reply within 800ms")) })
        #expect(Self.polls(link).unanswered.contains(.seconds(6)))
    }
}
