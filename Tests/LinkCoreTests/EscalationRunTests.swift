import DBus
import LinkCore
import LinkPolicy
import LinkSupervisor
import Testing

/// An escalation step from its first call to its verdict, which waits for
/// the adapter and never for longer than its deadline.
@Suite struct EscalationRunTests {
    static let hci0: ObjectPath = "/org/bluez/hci0"
    static let up = EscalationRun.Adapter(powered: true, blocked: false)
    static let down = EscalationRun.Adapter(powered: false, blocked: false)
    static let refused = LinkFailure(.transient, "org.bluez.Error.NotReady: Resource Not Ready")

    @Test func aPowerCycleIsOffAPauseAndOnThenTheVerdict() {
        var run = EscalationRun()
        #expect(run.begin(.powerCycle, adapterPath: Self.hci0, adapter: Self.up) == [.setPowered(Self.hci0, false)])
        #expect(run.adapterChanged(Self.down).isEmpty)
        #expect(run.poweredAnswered(.success(())) == [.startTimer(EscalationRun.powerOffPause)])
        #expect(run.timerFired() == [.setPowered(Self.hci0, true)])
        #expect(run.adapterChanged(Self.up).isEmpty, "no verdict before the call's answer")
        #expect(run.poweredAnswered(.success(())) == [.finished(.powerCycle, .success(()))])
        #expect(run.step == nil)
    }

    @Test func powerOnIsTriedThreeTimesASecondApartThenFails() {
        var run = EscalationRun()
        _ = run.begin(.powerCycle, adapterPath: Self.hci0, adapter: Self.up)
        _ = run.poweredAnswered(.success(()))
        _ = run.adapterChanged(Self.down)
        _ = run.timerFired()
        #expect(run.poweredAnswered(.failure(Self.refused)) == [.startTimer(EscalationRun.powerOnRetryPause)])
        #expect(run.timerFired() == [.setPowered(Self.hci0, true)])
        #expect(run.poweredAnswered(.failure(Self.refused)) == [.startTimer(EscalationRun.powerOnRetryPause)])
        #expect(run.timerFired() == [.setPowered(Self.hci0, true)])
        // The third refusal ends the calls; the adapter is not back, so the deadline runs.
        #expect(run.poweredAnswered(.failure(Self.refused)) == [.startTimer(EscalationRun.adapterWait)])
        #expect(run.timerFired() == [.finished(.powerCycle, .failure(Self.refused))])
    }

    @Test func aFailedPowerOffStillPowersOnAndReportsTheOffFailure() {
        var run = EscalationRun()
        _ = run.begin(.powerCycle, adapterPath: Self.hci0, adapter: Self.up)
        #expect(run.poweredAnswered(.failure(Self.refused)) == [.startTimer(EscalationRun.powerOffPause)])
        #expect(run.timerFired() == [.setPowered(Self.hci0, true)])
        #expect(run.poweredAnswered(.success(())) == [.finished(.powerCycle, .failure(Self.refused))])
    }

    @Test func withoutAnAdapterAPowerCycleFailsAtOnce() {
        var run = EscalationRun()
        #expect(run.begin(.powerCycle, adapterPath: nil, adapter: Self.down)
            == [.finished(.powerCycle, .failure(LinkFailure(.transient, "no adapter")))])
    }

    @Test func anHCIResetWaitsForTheAdapterAtMostItsDeadline() {
        var run = EscalationRun()
        #expect(run.begin(.hciReset, adapterPath: Self.hci0, adapter: Self.up).isEmpty)
        #expect(run.adapterChanged(Self.down).isEmpty)
        #expect(run.stepCallsDone(.hciReset, .success(())) == [.startTimer(EscalationRun.adapterWait)])
        #expect(run.adapterChanged(Self.up) == [.cancelTimer, .finished(.hciReset, .success(()))])

        _ = run.begin(.hciReset, adapterPath: Self.hci0, adapter: Self.up)
        _ = run.adapterChanged(Self.down)
        _ = run.stepCallsDone(.hciReset, .success(()))
        #expect(run.timerFired() == [.finished(.hciReset, .success(()))], "the deadline gives the verdict")
    }

    @Test func aUSBStepsAdapterMustGoAwayFirst() {
        var run = EscalationRun()
        _ = run.begin(.usbReset, adapterPath: Self.hci0, adapter: Self.up)
        // The old adapter, still listed and powered, proves nothing.
        #expect(run.stepCallsDone(.usbReset, .success(())) == [.startTimer(EscalationRun.reprobeWait)])
        #expect(run.adapterChanged(Self.up).isEmpty)
        #expect(run.adapterChanged(Self.down).isEmpty)
        #expect(run.adapterChanged(Self.up) == [.cancelTimer, .finished(.usbReset, .success(()))])
    }

    @Test func aFailedUSBStepOrUnblockHasNothingToWaitFor() {
        var run = EscalationRun()
        _ = run.begin(.usbRebind, adapterPath: Self.hci0, adapter: Self.down)
        #expect(run.stepCallsDone(.usbRebind, .failure(Self.refused)) == [.finished(.usbRebind, .failure(Self.refused))])
        _ = run.begin(.rfkillUnblock, adapterPath: Self.hci0, adapter: Self.down)
        #expect(run.stepCallsDone(.rfkillUnblock, .failure(Self.refused)) == [.finished(.rfkillUnblock, .failure(Self.refused))])
    }

    @Test func aBlockedAdapterIsNotBack() {
        var run = EscalationRun()
        _ = run.begin(.rfkillUnblock, adapterPath: Self.hci0, adapter: EscalationRun.Adapter(powered: true, blocked: true))
        #expect(run.stepCallsDone(.rfkillUnblock, .success(())) == [.startTimer(EscalationRun.adapterWait)])
        #expect(run.adapterChanged(Self.up) == [.cancelTimer, .finished(.rfkillUnblock, .success(()))])
    }

    @Test func answersForAnotherStepOrAPhaseLeftAreIgnored() {
        var run = EscalationRun()
        _ = run.begin(.hciReset, adapterPath: Self.hci0, adapter: Self.down)
        #expect(run.stepCallsDone(.usbReset, .success(())).isEmpty)
        #expect(run.poweredAnswered(.success(())).isEmpty)
        #expect(run.timerFired().isEmpty)
        #expect(run.cancel() == [.cancelTimer])
        #expect(run.stepCallsDone(.hciReset, .success(())).isEmpty, "cancelled: no verdict")
    }
}
