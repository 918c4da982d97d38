#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CEventLoop
import Synchronization

/// One thread, one epoll set: an executor for Swift concurrency and a
/// reactor for file descriptors and monotonic timers.
///
/// A virtual loop (`init(virtualNamed:startingAt:)`, EventLoop+Virtual.swift)
/// has no thread: the thread that made it drives it (`runUntilIdle`,
/// `advance(to:)`) and counts as the loop's, and its `now` moves only when
/// driven forward. The deterministic simulation runs the daemon's link
/// layer on one. Everything below holds for both, except where
/// EventLoop+Virtual.swift says otherwise (no sleeping, no moderation).
///
/// Threading rules:
/// - `enqueue` (Swift jobs) and `execute` may be called from any thread; the
///   work runs on the loop's thread, in the order it was submitted.
/// - `watch`, `setInterest`, `removeWatch`, `schedule`, `cancelTimer`,
///   the turn-end hooks and the handlers they take run on the loop's thread only
///   (`precondition(inLoop)`).
///
/// Invariants:
/// - the thread sleeps in `epoll_wait` whenever it has nothing to run: no
///   polling; an idle loop with no timers never wakes;
/// - a submission from another thread writes the eventfd only if the loop is
///   asleep and nobody has woken it yet, so a burst costs one wake-up;
/// - each turn runs, in order: the submitted work, the due timers, the
///   turn-end hooks (e.g. "write the readings the last batch produced in one
///   write"), then it sleeps, then the ready descriptors' handlers.
///
/// Load moderation: when two turns in a row handled descriptors flagged as
/// busy (`noteBusy()`) within `moderation` of each other, the loop waits out
/// the rest of `moderation` before it looks at descriptors again, so a dense
/// stream is taken in batches instead of one wake-up per message. It never
/// delays timers, and a quiet stream is never delayed at all.
public final class EventLoop: SerialExecutor, TaskExecutor, @unchecked Sendable {
    // @unchecked: `inbox` is a Mutex, `threadID` an atomic, `virtualClock` one of its own; everything else
    // is touched on the loop's thread only.

    public typealias Handler = (Readiness) -> Void

    /// What a watched descriptor is ready for (or interested in).
    public struct Readiness: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let readable = Readiness(rawValue: ceventloop_epoll_in)
        public static let writable = Readiness(rawValue: ceventloop_epoll_out)
        /// Hang-up or error: reported whatever the interest.
        public static let hangup = Readiness(rawValue: ceventloop_epoll_hup | ceventloop_epoll_err)
    }

    public struct WatchID: Hashable, Sendable { let raw: UInt64 }
    public struct TimerID: Hashable, Sendable { let raw: UInt64 }

    struct Watch {
        var fd: Int32
        var interest: Readiness
        var handler: Handler
    }

    struct Timer {
        var deadline: MonotonicInstant
        var handler: () -> Void
    }

    enum Work {
        case job(UnownedJob)
        case closure(@Sendable () -> Void)
    }

    struct Inbox {
        var work: [Work] = []
        /// The loop is in (or about to enter) epoll_wait.
        var sleeping = false
        /// The eventfd has been written since the loop last woke.
        var wakeSent = false
        var stopRequested = false
    }

    public let name: String
    /// Driven by its caller on virtual time, not run by a thread of its own.
    public let isVirtual: Bool
    let epollFD: Int32
    /// -1 on a virtual loop, which never sleeps and so is never woken.
    let wakeFD: Int32
    let inbox = Mutex(Inbox())
    private let threadID = Atomic<UInt>(0)
    /// A virtual loop's time, which several virtual loops may share
    /// (`VirtualLoops`): written by the driving thread, read from any (a
    /// recorder's stall check). Nil on a real loop.
    let virtualClock: VirtualClock?

    // Loop-thread state.
    var watches: [UInt64: Watch] = [:]
    /// Watches per descriptor: epoll registers a descriptor once, libdbus may watch it twice (read, write).
    var watchesByFD: [Int32: [UInt64]] = [:]
    var timers: [UInt64: Timer] = [:]
    private var nextID: UInt64 = 1
    var turnEndHooks: [(id: Int, hook: () -> Void)] = []
    var busyThisTurn = false
    /// A virtual loop is being driven (`runUntilIdle`): work it runs must not drive it again.
    var driving = false
    private var lastBusyTurn: MonotonicInstant?
    /// See the type's note on load moderation; zero turns it off.
    public var moderation: Duration = .zero

    /// Starts a loop on a new thread.
    public convenience init(name: String) {
        self.init(name: name, virtualClock: nil)
    }

    /// A real loop on a new thread, or (`virtualClock` set) a virtual one on
    /// that clock, driven by the calling thread.
    init(name: String, virtualClock: VirtualClock?) {
        self.name = name
        self.virtualClock = virtualClock
        isVirtual = virtualClock != nil
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeFD = isVirtual ? -1 : eventfd(0, Int32(EFD_CLOEXEC) | Int32(EFD_NONBLOCK))
        precondition(epollFD >= 0 && (isVirtual || wakeFD >= 0), "epoll_create1/eventfd failed: errno \(errno)")
        if isVirtual {
            threadID.store(Self.currentThread, ordering: .releasing)
            return
        }
        var event = epoll_event()
        event.events = ceventloop_epoll_in
        event.data.u64 = 0
        precondition(epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event) == 0)
        startThread()
    }

    deinit {
        // A real loop's thread closes its descriptors when it ends (and holds
        // the loop until then); a virtual loop has no thread.
        if isVirtual { close(epollFD) }
    }

    /// The process-wide loop for connections that were not given one (the
    /// command-line clients, tests, the simulator).
    public static let shared = EventLoop(name: "event-loop")

    /// Whether the caller runs on this loop's thread (a virtual loop's: the
    /// thread that made it).
    public var inLoop: Bool { threadID.load(ordering: .acquiring) == Self.currentThread }

    private static var currentThread: UInt { UInt(bitPattern: Int(bitPattern: pthread_self())) }

    /// The loop's clock: CLOCK_MONOTONIC, or a virtual loop's virtual time.
    /// What its timers run on, and what code on the loop reads the time
    /// from, so that a simulation can drive it. Any thread.
    public var now: MonotonicInstant {
        virtualClock?.now ?? .now
    }

    // MARK: Executor

    public func enqueue(_ job: consuming ExecutorJob) {
        submit(.job(UnownedJob(job)))
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    public func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }

    public func checkIsolated() {
        precondition(inLoop, "not on the event loop \(name)")
    }

    /// Runs `body` on the loop's thread, after the work submitted before it.
    public func execute(_ body: @escaping @Sendable () -> Void) {
        submit(.closure(body))
    }

    /// Asks the loop to end after the current turn; its thread exits. A
    /// virtual loop runs nothing more.
    public func stop() {
        let wake = inbox.withLock { inbox -> Bool in
            inbox.stopRequested = true
            return !inbox.wakeSent
        }
        if wake, !isVirtual { signalWake() }
    }

    private func submit(_ work: Work) {
        let wake = inbox.withLock { inbox -> Bool in
            inbox.work.append(work)
            guard inbox.sleeping, !inbox.wakeSent else { return false }
            inbox.wakeSent = true
            return true
        }
        if wake { signalWake() }
    }

    private func signalWake() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakeFD, $0.baseAddress, 8) }
    }

    // MARK: Descriptors (loop thread only)

    /// Watches `fd` for `interest`; `handler` runs on the loop with what it is ready for.
    public func watch(_ fd: Int32, interest: Readiness, _ handler: @escaping Handler) -> WatchID {
        checkIsolated()
        let id = nextID
        nextID += 1
        watches[id] = Watch(fd: fd, interest: interest, handler: handler)
        watchesByFD[fd, default: []].append(id)
        register(fd)
        return WatchID(raw: id)
    }

    public func setInterest(_ watch: WatchID, _ interest: Readiness) {
        checkIsolated()
        guard var entry = watches[watch.raw], entry.interest != interest else { return }
        entry.interest = interest
        watches[watch.raw] = entry
        register(entry.fd)
    }

    /// Stops watching; call before the descriptor is closed.
    public func removeWatch(_ watch: WatchID) {
        checkIsolated()
        guard let entry = watches.removeValue(forKey: watch.raw) else { return }
        watchesByFD[entry.fd]?.removeAll { $0 == watch.raw }
        if watchesByFD[entry.fd]?.isEmpty ?? true {
            watchesByFD[entry.fd] = nil
            _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, entry.fd, nil)
        } else {
            register(entry.fd)
        }
    }

    /// (Re)registers `fd` with the union of its watches' interests.
    private func register(_ fd: Int32) {
        let ids = watchesByFD[fd] ?? []
        var mask: UInt32 = 0
        for id in ids { mask |= watches[id]?.interest.rawValue ?? 0 }
        guard mask != 0 else {
            // Registered with no interest, epoll would still report a hang-up,
            // level-triggered, on every turn: a busy loop. Unregister instead.
            _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
            return
        }
        var event = epoll_event()
        event.events = mask
        event.data.u64 = UInt64(UInt32(bitPattern: fd)) + 1
        if epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event) != 0 {
            _ = epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event)
        }
    }

    /// Marks this turn as one that handled a dense stream's data (the
    /// daemon: readings); see load moderation.
    public func noteBusy() {
        busyThisTurn = true
    }

    // MARK: Timers (loop thread only)

    /// Runs `handler` on the loop at `deadline` (the loop's clock, `now`).
    @discardableResult
    public func schedule(at deadline: MonotonicInstant, _ handler: @escaping () -> Void) -> TimerID {
        checkIsolated()
        let id = nextID
        nextID += 1
        timers[id] = Timer(deadline: deadline, handler: handler)
        return TimerID(raw: id)
    }

    @discardableResult
    public func schedule(after delay: Duration, _ handler: @escaping () -> Void) -> TimerID {
        schedule(at: now + delay, handler)
    }

    public func cancelTimer(_ timer: TimerID) {
        checkIsolated()
        timers[timer.raw] = nil
    }

    /// Runs `hook` once per turn, after the work and the due timers and
    /// before the loop sleeps; returns a token for removal.
    public func addTurnEndHook(_ hook: @escaping () -> Void) -> Int {
        checkIsolated()
        let id = Int(nextID)
        nextID += 1
        turnEndHooks.append((id, hook))
        return id
    }

    public func removeTurnEndHook(_ id: Int) {
        checkIsolated()
        turnEndHooks.removeAll { $0.id == id }
    }

    // MARK: The loop

    private func startThread() {
        let box = Unmanaged.passRetained(self).toOpaque()
        #if canImport(Musl)
        var thread: pthread_t?  // musl's pthread_t is a pointer, glibc's an integer
        #else
        var thread = pthread_t()
        #endif
        // The loop runs all of a daemon's work, so it gets glibc's default stack
        // (RLIMIT_STACK, 8 MiB) whatever the C library: musl's default is 128 KiB.
        // Only the pages touched cost memory.
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setstacksize(&attributes, 8 << 20)
        let result = pthread_create(&thread, &attributes, { raw in
            guard let raw else { return nil }
            let loop = Unmanaged<EventLoop>.fromOpaque(raw).takeRetainedValue()
            loop.threadID.store(UInt(bitPattern: Int(bitPattern: pthread_self())), ordering: .releasing)
            // Shown by top -H, perf and /proc/PID/task/*/comm; the kernel takes 15 bytes.
            _ = pthread_setname_np(pthread_self(), String(loop.name.utf8.prefix(15)) ?? "event-loop")
            loop.run()
            return nil
        }, box)
        precondition(result == 0, "pthread_create failed: \(result)")
        pthread_detach(thread)
    }

    private func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        let executor = asUnownedSerialExecutor()
        let taskExecutor = asUnownedTaskExecutor()
        while true {
            // 1. Submitted work, including what it submits in turn.
            runSubmittedWork(executor, taskExecutor)
            // 2. Due timers, earliest first.
            runDueTimers()
            // 3. Turn-end hooks (a turn's readings are written here, in one batch).
            runTurnEndHooks()

            // Moderation: a dense stream is read in batches.
            let turnStart = MonotonicInstant.now
            if busyThisTurn {
                if let last = lastBusyTurn, moderation > .zero, last.duration(to: turnStart) < moderation {
                    let until = min(last + moderation, earliestTimerDeadline() ?? (last + moderation))
                    MonotonicInstant.sleep(until: until)
                }
                lastBusyTurn = .now
            }
            busyThisTurn = false

            // 4. Sleep until a descriptor, a submission or a timer.
            enum Next { case stop, poll, sleep }
            let next = inbox.withLock { inbox -> Next in
                if inbox.stopRequested { return .stop }
                if !inbox.work.isEmpty { return .poll }
                inbox.sleeping = true
                return .sleep
            }
            if next == .stop { break }
            let timeout: Int32
            if next == .poll {
                timeout = 0  // work arrived: only look at the descriptors
            } else if let deadline = earliestTimerDeadline() {
                timeout = MonotonicInstant.now.millisecondsUntil(deadline)
            } else {
                timeout = -1
            }
            let count = events.withUnsafeMutableBufferPointer { buffer in
                epoll_wait(epollFD, buffer.baseAddress, Int32(buffer.count), timeout)
            }
            inbox.withLock { inbox in
                inbox.sleeping = false
                inbox.wakeSent = false
            }
            guard count > 0 else { continue }
            // 5. The ready descriptors' handlers.
            handleReady(events, count: Int(count))
        }
        close(wakeFD)
        close(epollFD)
        threadID.store(0, ordering: .releasing)
    }
}
