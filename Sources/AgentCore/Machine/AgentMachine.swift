import FoundationEssentials

/// The time of an event, in both kinds (docs/architecture.md §4): monotonic seconds to schedule by,
/// wall time for the 24-hour validity (ST-1, ST-3).
public struct Now: Sendable, Equatable {
    public var monotonic: Seconds
    public var wall: Date

    public init(monotonic: Seconds, wall: Date) {
        self.monotonic = monotonic
        self.wall = wall
    }
}

/// Someone waiting for a refresh (RF-5) or a `postEvent`: the interpreter holds the callback.
public struct Waiter: Hashable, Sendable {
    public let id: UInt64
    public init(_ id: UInt64) { self.id = id }
}

/// What a request was sent for; its answer comes back to the machine with it.
public enum Call: Sendable, Equatable {
    /// RF-4: the generation the request was sent in.
    case flags(generation: UInt64)
    case applicationOpen
    case registerUser(userId: String)
    case registerDevice(token: String)
    case unregisterDevice
    /// IM-4: an impression's ledger entry is released when its send fails in the same generation.
    case postEvent(impression: Impression?, generation: UInt64, waiter: Waiter?)
}

/// What the machine asks its interpreter to do, in order. Notifications and completions
/// are delivered once the sends and the save are done (docs/architecture.md §2).
public enum AgentAction: Sendable, Equatable {
    case send(HTTPRequest, Call)
    /// ST-6: one save per event, of the state at the end of the event.
    case persist(PersistentState)
    case notify(AgentEvent)
    case complete(Waiter, RefreshError?)
}

/// The Pushwoosh iOS SDK core, headless, as a value (docs/rules.md §1–6): each event is a
/// `mutating func` given `now` that returns the actions to perform; reads are pure.
/// It composes one value per state machine, each in its file with its rules:
/// `RefreshMachine` (Refresh.swift, with its wiring into the agent), `RegistrationMachine`
/// (Registrations.swift), `ImpressionLedger` (Impressions.swift), `Validity` (Validity.swift)
/// and `SessionMachine` (Session.swift); the reads are in AgentMachine+Reads.swift, the primer in
/// Primer/AgentMachine+Primer.swift. `Agent` is its interpreter.
public struct AgentMachine {
    public private(set) var settings: AgentSettings
    public internal(set) var state: PersistentState
    /// Jitter (RF-10, RF-12), the HWID (SE-2) and push tokens: seeded at init.
    var random: AnyRandom
    /// The time of the event being handled.
    var now: Now

    var validity = Validity()
    var session = SessionMachine()
    var refresh: RefreshMachine
    var registrations = RegistrationMachine()
    var impressions = ImpressionLedger()
    var storage = Storage()

    /// A failed save is retried after this.
    public static let saveRetryDelay: Seconds = 30

    public init(settings: AgentSettings, random: any RandomNumberGenerator, now: Now) {
        self.settings = settings
        self.random = AnyRandom(base: random)
        self.now = now
        self.state = PersistentState(hwid: "")
        self.refresh = RefreshMachine(flags: settings.flags)
    }

    /// Whether the state was saved, and whether an event must save it although it did not change.
    struct Storage {
        var failure: String?
        /// When the save failing now last failed (device time).
        var failureAt: Date?
        /// What loading the state at start found wrong (a damaged file set aside).
        var loadProblem: StorageProblem?
        var retryDeadline: Seconds?
        var saveDue = false
        /// The state at the start of the event being handled.
        var before: PersistentState?
    }

    // MARK: - Events

    /// Every event starts here: flags past their lifetime stop being served first (ST-3, LS-3).
    mutating func begin(_ now: Now) -> [AgentAction] {
        self.now = now
        storage.before = state
        return expireIfDue()
    }

    /// Every event ends here: the state, if it changed (or a save is due), is saved first.
    mutating func finish(_ actions: [AgentAction]) -> [AgentAction] {
        defer { storage.before = nil }
        guard storage.saveDue || storage.before != state else { return actions }
        storage.saveDue = false
        return [.persist(state)] + actions
    }

    /// Loads `loaded` (creating the HWID on first start, SE-2), then enters the initial app
    /// state, which starts a session and a refresh when it is `active` (RF-1).
    public mutating func start(_ loaded: StoreLoad, now: Now) -> [AgentAction] {
        var out = begin(now)
        if let existing = loaded.state { state = existing }
        storage.before = state
        if let damaged = loaded.damage {
            storage.loadProblem = StorageProblem(.load, message: damaged, at: now.wall)
            out.append(.notify(.storeDamaged(message: damaged)))
        }
        if state.hwid.isEmpty { state = PersistentState(hwid: Self.makeHWID(using: &random)) }  // SE-2
        if state.userId == nil, let initial = settings.initialUserId, !initial.isEmpty { state.userId = initial }
        loadStoredFlags()
        if settings.device.initialAppState == .active { out += appStateChanged(to: .active).actions }
        return finish(out)
    }

    /// What a save of a `.persist` action came to: nil when it succeeded.
    public mutating func saved(error: String?, now: Now) -> [AgentAction] {
        self.now = now
        guard let message = error else {
            storage.retryDeadline = nil
            guard storage.failure != nil else { return [] }
            storage.failure = nil
            storage.failureAt = nil
            return [.notify(.storeRecovered)]
        }
        defer { storage.failure = message }
        storage.failureAt = now.wall
        storage.retryDeadline = now.monotonic + Self.saveRetryDelay
        return storage.failure == message ? [] : [.notify(.storeFailed(message: message))]
    }

    /// An answer to a request sent with `call`.
    public mutating func answered(_ call: Call, _ outcome: HTTPOutcome, now: Now) -> [AgentAction] {
        var out = begin(now)
        switch call {
        case .flags(let generation): out += flagsAnswered(outcome, generation: generation)
        case .applicationOpen: out.append(.notify(.callFinished(method: .applicationOpen, error: PushwooshAPI.classify(outcome).failure)))
        case .registerUser(let userId): out += registerUserAnswered(userId, outcome)
        case .registerDevice(let token): out += registerDeviceAnswered(token, outcome)
        case .unregisterDevice: out.append(.notify(.callFinished(method: .unregisterDevice, error: PushwooshAPI.classify(outcome).failure)))
        case .postEvent(let impression, let generation, let waiter):
            out += postEventAnswered(outcome, impression: impression, generation: generation, waiter: waiter)
        }
        return finish(out)
    }

    /// SIGHUP: takes new settings. A new application code invalidates the flags (ST-2);
    /// a reload lifts the stop after 401/403 (RF-11).
    public mutating func reload(_ newSettings: AgentSettings, now: Now) -> [AgentAction] {
        var out = begin(now)
        let codeChanged = newSettings.server.applicationCode != settings.server.applicationCode
        settings = newSettings
        let wasFatal = refresh.reconfigure(newSettings.flags)
        if codeChanged {
            refresh.identityChanged(keepBackoff: true)
            impressions.reset()
            out += stopServing(.discarded)
        }
        if session.appState == .active, codeChanged || wasFatal {
            out += requestFlags(.reload)
        } else {
            let world = refreshWorld
            refresh.schedulePeriodic(world, &random)
        }
        return finish(out)
    }

    // MARK: - Timers

    /// What a timer does when it fires (docs/device-clock.md H: `advanceClock` lists them).
    public enum TimerKind: String, Sendable, Equatable, CaseIterable {
        /// RF-2: the hourly refresh (while active).
        case refresh
        /// RF-10: a failed refresh retried (or deferred by `Retry-After`).
        case retry
        /// ST-3: the served flags reach their lifetime.
        case expired
        /// SE-3: `registerDevice` retried.
        case registrationRetry
        /// ST-6: a failed save retried.
        case saveRetry
    }

    /// Every armed timer with its monotonic deadline, earliest first, derived from the state.
    public var timers: [(kind: TimerKind, deadline: Seconds)] {
        let all: [(TimerKind, Seconds?)] = [
            (.refresh, refresh.periodicDeadline), (.retry, refresh.retryDeadline),
            (.expired, validity.deadline(lifetime: settings.flags.storedFlagsLifetime)),
            (.registrationRetry, registrations.retryDeadline), (.saveRetry, storage.retryDeadline),
        ]
        return all.compactMap { kind, deadline in deadline.map { (kind: kind, deadline: $0) } }.sorted { $0.deadline < $1.deadline }
    }

    /// SE-1: the device time at which the current session ends if the app stays in the
    /// background (no timer: it changes nothing until the app returns).
    public var sessionEndsAt: Seconds? { session.endsAt(sessionTimeout: settings.flags.sessionTimeout) }

    /// The earliest monotonic time at which `fireDueTimers` has work, derived from the state.
    public var nextDeadline: Seconds? { timers.first?.deadline }

    /// docs/device-clock.md H: the controlled device clock is now `offset` ahead of the real one; the
    /// offset is part of the device's state (ST-6). With `save` false it rides along with
    /// the next save, which is never later than the save of anything received at the new
    /// time (flags stored with a later offset than the one on disk would look as if they
    /// came from the future after a crash); `save` true saves it now.
    public mutating func clockOffsetChanged(_ offset: Seconds, save: Bool, now: Now) -> [AgentAction] {
        state.clockOffset = offset > 0 ? offset : nil
        guard save else { return [] }
        let out = begin(now)
        storage.saveDue = true
        return finish(out)
    }

    /// Runs every timer whose deadline has passed; the expiry timer's work (ST-3) is `begin`'s.
    public mutating func fireDueTimers(now: Now) -> [AgentAction] {
        var out = begin(now)
        let t = now.monotonic
        if let d = storage.retryDeadline, d <= t {
            storage.retryDeadline = nil
            storage.saveDue = true
        }
        out += registrationTimers()  // SE-3
        out += refreshTimers()  // RF-2, RF-10
        return finish(out)
    }

    // MARK: - Identifiers

    /// SE-2: an uppercase RFC 4122 version-4 UUID.
    public static func makeHWID(using random: inout some RandomNumberGenerator) -> String {
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &random) }
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let hex = bytes.hexString(uppercase: true)
        let parts = [hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4),
                     hex.dropFirst(16).prefix(4), hex.dropFirst(20)]
        return parts.joined(separator: "-")
    }

    /// A simulated APNs device token: 32 bytes, lowercase hex (A.2).
    static func makePushToken(using random: inout some RandomNumberGenerator) -> String {
        (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) }.hexString()
    }
}

/// Lets the machine hold any generator (the system's, or a seeded one in tests).
struct AnyRandom: RandomNumberGenerator {
    var base: any RandomNumberGenerator
    mutating func next() -> UInt64 { base.next() }
}
