import Glibc
import Synchronization  // Atomic only

/// One thread's epoll loop: file-descriptor readiness, monotonic timers, and
/// work deferred to the end of the current iteration (used to flush each
/// connection's output once). Everything the daemon does arrives through it,
/// HTTP included (libcurl's sockets and timer): there is no other thread, so
/// nothing is ever handed over from one.
///
/// Threading: `run()` is called on one thread, the loop thread. Everything
/// except `stop()`, `wakeups` and `now` must be called on the loop thread, or
/// before `run()` on the thread that will call it (that is how a daemon sets
/// the loop up). Handlers run on the loop thread. This is the invariant behind
/// `@unchecked Sendable`: the mutable state below (`registrations`, timers,
/// the deferred queue) is only touched by the loop thread; the cross-thread
/// state (`stopRequested`, `wakeupCount`, `loopThread`) is atomic. Debug
/// builds check the thread.
///
/// Idle cost: `epoll_wait` blocks with the next timer's deadline as its
/// timeout, or forever when there is none; the loop never wakes up
/// periodically on its own. `wakeups` counts `epoll_wait` returns.
public final class EventLoop: @unchecked Sendable {
    /// What a registration waits for.
    public struct Interest: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let read = Interest(rawValue: 1)
        public static let write = Interest(rawValue: 2)
        /// The peer shut down its writing side (`EPOLLRDHUP`), even while its last
        /// bytes are unread. Level-triggered like the rest: unregister once seen.
        public static let peerClosed = Interest(rawValue: 4)
        /// Neither: the registration still reports hangup and error.
        public static let none: Interest = []
    }

    /// What happened to a descriptor.
    public struct Events: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let readable = Events(rawValue: 1)
        public static let writable = Events(rawValue: 2)
        /// Both directions are shut down (`EPOLLHUP`): for a stream socket,
        /// the peer has closed it. Reported even with `Interest.none`.
        public static let hangup = Events(rawValue: 4)
        public static let error = Events(rawValue: 8)
        /// `EPOLLRDHUP` (only with `Interest.peerClosed`).
        public static let peerClosed = Events(rawValue: 16)
    }

    public typealias Handler = (Events) -> Void

    /// Identifies a scheduled timer, for `cancel(_:)`.
    public struct TimerHandle: Hashable, Sendable {
        fileprivate let id: UInt64
    }

    private final class Registration {
        let generation: UInt32
        var interest: Interest
        let handler: Handler
        init(generation: UInt32, interest: Interest, handler: @escaping Handler) {
            self.generation = generation
            self.interest = interest
            self.handler = handler
        }
    }

    private struct TimerEntry {
        let deadline: Double
        let id: UInt64
        static func < (a: TimerEntry, b: TimerEntry) -> Bool {
            a.deadline < b.deadline || (a.deadline == b.deadline && a.id < b.id)
        }
    }

    private let epollFD: FileDescriptor
    private let wakeFD: FileDescriptor
    private let eventsBuffer: UnsafeMutableRawPointer
    let maxEvents: Int32 = 128

    // Loop-thread state.
    /// Indexed by descriptor number (small integers): no hashing per event.
    private var registrations: [Registration?] = []
    private var nextGeneration: UInt32 = 0
    private var timerHeap: [TimerEntry] = []
    private var timerWork: [UInt64: () -> Void] = [:]
    private var nextTimerID: UInt64 = 0
    /// Work for the end of the iteration, in the order queued; a connection's flush is queued as
    /// the connection itself (no closure allocated per flush).
    private enum Deferred { case work(() -> Void), flush(Connection) }
    private var deferred: [Deferred] = []
    private var cachedNow: Double
    /// Where `now` comes from (docs/architecture.md §4); never changes.
    public let clock: any LoopClock

    // Cross-thread state.
    private let stopRequested = Atomic<Bool>(false)
    private let wakeupCount = Atomic<Int>(0)
    /// `pthread_self()` of the thread in `run()`, 0 when not running.
    private let loopThread = Atomic<UInt>(0)

    /// A scratch buffer the loop thread may use for reads (64 KiB); its
    /// contents are only valid until the handler that filled it returns.
    /// Shared by all connections of the loop so that idle clients cost no
    /// read buffer each.
    public let readBuffer: UnsafeMutableRawBufferPointer
    /// Output buffers of connections whose output drained, for the next that queues some (Connection.swift).
    var outputBuffers: [[UInt8]] = []

    /// `clock`: the system's monotonic clock unless a test passes a `ManualLoopClock`.
    public init(clock: any LoopClock = SystemLoopClock.shared) throws(PosixError) {
        self.clock = clock
        epollFD = FileDescriptor(try retryingEINTR("epoll_create1") { Linux.epollCreate1(O_CLOEXEC) })
        wakeFD = FileDescriptor(try retryingEINTR("eventfd") { Linux.eventFD(0, O_CLOEXEC | O_NONBLOCK) })
        eventsBuffer = UnsafeMutableRawPointer.allocate(
            byteCount: Int(maxEvents) * Linux.epollEventSize, alignment: 8)
        readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        cachedNow = clock.now
        // The wake descriptor uses generation 0, which no registration gets.
        try control(Linux.EPOLL_CTL_ADD, fd: wakeFD.rawValue, events: Linux.EPOLLIN, generation: 0)
        clock.attach { [weak self] in self?.wake() }
    }

    deinit {
        eventsBuffer.deallocate()
        readBuffer.deallocate()
    }

    // MARK: Time

    /// The clock's monotonic time now, in seconds (`CLOCK_MONOTONIC` unless a test
    /// passed another clock). Any thread.
    public var now: Double { clock.now }

    /// The monotonic time read when the current iteration's `epoll_wait`
    /// returned: cheap, and good enough for "last activity" stamps.
    public var iterationTime: Double { cachedNow }

    /// How many times `epoll_wait` has returned (benchmarks and tests: an
    /// idle loop must not count up). Any thread.
    public var wakeups: Int { wakeupCount.load(ordering: .relaxed) }

    // MARK: Descriptors

    /// Watches `fd` for `interest`; `handler` runs on the loop thread with
    /// what happened. Level-triggered. The loop does not own `fd`:
    /// `unregister` it before closing it.
    public func register(_ fd: Int32, interest: Interest, handler: @escaping Handler) throws(PosixError) {
        assertOnLoopThread()
        precondition(registration(fd) == nil, "fd \(fd) is already registered")
        nextGeneration &+= 1
        if nextGeneration == 0 { nextGeneration = 1 }
        let registration = Registration(generation: nextGeneration, interest: interest, handler: handler)
        try control(Linux.EPOLL_CTL_ADD, fd: fd, events: Self.epollEvents(interest), generation: registration.generation)
        if Int(fd) >= registrations.count { registrations += repeatElement(nil, count: Int(fd) + 1 - registrations.count) }
        registrations[Int(fd)] = registration
    }

    private func registration(_ fd: Int32) -> Registration? {
        fd >= 0 && Int(fd) < registrations.count ? registrations[Int(fd)] : nil
    }

    /// Changes what a registered `fd` waits for (no syscall when unchanged).
    public func modify(_ fd: Int32, interest: Interest) throws(PosixError) {
        assertOnLoopThread()
        guard let registration = registration(fd) else {
            preconditionFailure("fd \(fd) is not registered")
        }
        if registration.interest == interest { return }
        try control(Linux.EPOLL_CTL_MOD, fd: fd, events: Self.epollEvents(interest), generation: registration.generation)
        registration.interest = interest
    }

    /// Stops watching `fd`. Events already collected for it in this
    /// iteration are dropped, even if a new registration reuses the number.
    public func unregister(_ fd: Int32) {
        assertOnLoopThread()
        guard registration(fd) != nil else { return }
        registrations[Int(fd)] = nil
        // Fails only if fd was already closed, which removed it from epoll.
        _ = Linux.epollCtl(epollFD.rawValue, Linux.EPOLL_CTL_DEL, fd, nil)
    }

    public func isRegistered(_ fd: Int32) -> Bool { registration(fd) != nil }

    private static func epollEvents(_ interest: Interest) -> UInt32 {
        var events: UInt32 = 0
        if interest.contains(.read) { events |= Linux.EPOLLIN }
        if interest.contains(.write) { events |= Linux.EPOLLOUT }
        if interest.contains(.peerClosed) { events |= Linux.EPOLLRDHUP }
        return events
    }

    private func control(_ op: Int32, fd: Int32, events: UInt32, generation: UInt32) throws(PosixError) {
        var event: (UInt64, UInt64) = (0, 0)  // 16 bytes, enough for either layout
        try withUnsafeMutableBytes(of: &event) { (raw) throws(PosixError) in
            raw.storeBytes(of: events, toByteOffset: 0, as: UInt32.self)
            let data = UInt64(generation) << 32 | UInt64(UInt32(bitPattern: fd))
            raw.storeBytes(of: data, toByteOffset: Linux.epollDataOffset, as: UInt64.self)
            try retryingEINTR("epoll_ctl") { Linux.epollCtl(epollFD.rawValue, op, fd, raw.baseAddress) }
        }
    }

    // MARK: Work

    /// Runs `work` on the loop thread at the end of the current iteration,
    /// after every handler of this iteration has run (e.g. to flush output
    /// that several handlers queued). Loop thread only.
    public func deferToEndOfIteration(_ work: @escaping () -> Void) {
        assertOnLoopThread()
        deferred.append(.work(work))
    }

    /// `connection.flushDeferred()` at the end of this iteration, in order with `deferToEndOfIteration`.
    func deferFlush(_ connection: Connection) {
        assertOnLoopThread()
        deferred.append(.flush(connection))
    }

    /// Runs `work` on the loop thread once `now >= deadline` (monotonic
    /// seconds). Timers with the same deadline run in scheduling order.
    @discardableResult
    public func schedule(at deadline: Double, _ work: @escaping () -> Void) -> TimerHandle {
        assertOnLoopThread()
        nextTimerID += 1
        let entry = TimerEntry(deadline: deadline, id: nextTimerID)
        timerWork[entry.id] = work
        heapPush(entry)
        return TimerHandle(id: entry.id)
    }

    @discardableResult
    public func schedule(after seconds: Double, _ work: @escaping () -> Void) -> TimerHandle { schedule(at: now + seconds, work) }

    /// Cancels a timer; no effect if it already ran or was cancelled.
    public func cancel(_ timer: TimerHandle) {
        assertOnLoopThread()
        guard timerWork.removeValue(forKey: timer.id) != nil else { return }
        // The heap entry is skipped (and dropped) when it comes up; drop it
        // now when it is at the top, so an idle loop never wakes for it.
        dropCancelledTimers()
        // Long timers cancelled early (e.g. idle timeouts of connections
        // that closed) would otherwise pile up until their deadlines.
        if timerHeap.count > 64, timerHeap.count > 2 * timerWork.count {
            timerHeap = timerHeap.filter { timerWork[$0.id] != nil }.sorted(by: <)
        }
    }

    // MARK: Running

    /// Runs the loop on the calling thread until `stop()`.
    public func run() throws(PosixError) {
        precondition(loopThread.load(ordering: .relaxed) == 0, "EventLoop.run() is already running")
        loopThread.store(UInt(pthread_self()), ordering: .relaxed)
        defer { loopThread.store(0, ordering: .relaxed) }
        while !stopRequested.load(ordering: .acquiring) {
            try runOnce()
        }
        stopRequested.store(false, ordering: .relaxed)
        runDeferred()
    }

    /// One iteration on the calling thread, waiting for I/O at most `milliseconds` (0: only
    /// what is ready now): for an embedded driver (a test that owns the loop and steps it
    /// between writing a client's bytes and reading the server's, with no thread and no sleep).
    public func turn(waitingAtMost milliseconds: Int32 = 0) throws(PosixError) {
        precondition(loopThread.load(ordering: .relaxed) == 0, "EventLoop.turn() while run() is running")
        loopThread.store(UInt(pthread_self()), ordering: .relaxed)
        defer { loopThread.store(0, ordering: .relaxed) }
        try runOnce(waitingAtMost: milliseconds)
    }

    /// Makes `run()` return after the current iteration. Any thread.
    public func stop() {
        stopRequested.store(true, ordering: .releasing)
        wake()
    }

    private func wake() {
        var one: UInt64 = 1
        // EAGAIN means the counter is already non-zero: the loop will wake.
        _ = withUnsafeBytes(of: &one) { Glibc.write(wakeFD.rawValue, $0.baseAddress, 8) }
    }

    private func runOnce(waitingAtMost limit: Int32? = nil) throws(PosixError) {
        runDeferred()
        let natural = waitTimeout()
        let timeout = limit.map { natural < 0 ? $0 : min($0, natural) } ?? natural
        let count = try retryingEINTR("epoll_wait") {
            Linux.epollWait(epollFD.rawValue, eventsBuffer, maxEvents, timeout)
        }
        wakeupCount.add(1, ordering: .relaxed)
        cachedNow = clock.now
        for index in 0..<Int(count) {
            let base = eventsBuffer + index * Linux.epollEventSize
            let raw = base.loadUnaligned(as: UInt32.self)
            let data = (base + Linux.epollDataOffset).loadUnaligned(as: UInt64.self)
            let generation = UInt32(truncatingIfNeeded: data >> 32)
            let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: data))
            if generation == 0 {
                drainWake()  // stop() from another thread
                continue
            }
            guard let registration = registration(fd), registration.generation == generation else { continue }
            var events: Events = []
            if raw & Linux.EPOLLIN != 0 { events.insert(.readable) }; if raw & Linux.EPOLLOUT != 0 { events.insert(.writable) }
            if raw & Linux.EPOLLHUP != 0 { events.insert(.hangup) }; if raw & Linux.EPOLLERR != 0 { events.insert(.error) }
            if raw & Linux.EPOLLRDHUP != 0 { events.insert(.peerClosed) }
            registration.handler(events)
        }
        runDueTimers()
    }

    /// Milliseconds until the next timer, rounded up (never early); -1 when
    /// there is none; 0 when deferred work is waiting.
    private func waitTimeout() -> Int32 {
        if !deferred.isEmpty { return 0 }
        dropCancelledTimers()
        guard let next = timerHeap.first else { return -1 }
        let remaining = next.deadline - clock.now
        if remaining <= 0 { return 0 }
        // A manual clock wakes the loop when it moves: until then, only I/O can.
        guard clock.passesByItself else { return -1 }
        let milliseconds = (remaining * 1000).rounded(.up)
        return milliseconds >= Double(Int32.max) ? Int32.max : Int32(milliseconds)
    }

    private func drainWake() {
        var value: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &value) { Glibc.read(wakeFD.rawValue, $0.baseAddress, 8) }
    }

    private func runDeferred() {
        // Deferred work may defer more; it runs in the same pass.
        var index = 0
        while index < deferred.count {
            switch deferred[index] {
            case .work(let work): work()
            case .flush(let connection): connection.flushDeferred()
            }
            index += 1
        }
        deferred.removeAll(keepingCapacity: true)
    }

    private func runDueTimers() {
        guard !timerHeap.isEmpty else { return }
        let now = clock.now
        while let top = timerHeap.first, top.deadline <= now {
            heapPop()
            if let work = timerWork.removeValue(forKey: top.id) { work() }
        }
    }

    private func dropCancelledTimers() { while let top = timerHeap.first, timerWork[top.id] == nil { heapPop() } }

    // MARK: Timer heap (binary min-heap by deadline, then id)

    private func heapPush(_ entry: TimerEntry) {
        timerHeap.append(entry)
        var child = timerHeap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard timerHeap[child] < timerHeap[parent] else { break }
            timerHeap.swapAt(child, parent)
            child = parent
        }
    }

    private func heapPop() {
        let last = timerHeap.removeLast()
        guard !timerHeap.isEmpty else { return }
        timerHeap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < timerHeap.count, timerHeap[left] < timerHeap[smallest] { smallest = left }; if right < timerHeap.count, timerHeap[right] < timerHeap[smallest] { smallest = right }
            if smallest == parent { return }
            timerHeap.swapAt(parent, smallest)
            parent = smallest
        }
    }

    // MARK: Thread check

    /// Traps (debug builds) when called off the loop thread while it runs.
    @inline(__always)
    public func assertOnLoopThread(file: StaticString = #fileID, line: UInt = #line) {
        assert({
            let thread = loopThread.load(ordering: .relaxed)
            return thread == 0 || thread == UInt(pthread_self())
        }(), "EventLoop used off its thread", file: file, line: line)
    }

    /// True on the loop thread while `run()` is running.
    public var isOnLoopThread: Bool { loopThread.load(ordering: .relaxed) == UInt(pthread_self()) }
}
