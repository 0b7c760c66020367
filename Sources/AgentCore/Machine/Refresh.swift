import FoundationEssentials

/// What the refresh machine is told about the rest of the agent at an event.
struct RefreshWorld: Sendable {
    var now: Now
    /// SE-1: automatic refreshes run in the foreground only.
    var active: Bool
    /// RF-6: the throttle answers from stored flags only while they are valid.
    var flagsValid: Bool
    /// RF-8: flags may be requested from the base URL in effect.
    var canRequest: Bool
    /// RF-12: this device's stable share of the period.
    var deviceOffset: Seconds
}

/// What the refresh machine asks for; `AgentMachine` turns it into actions.
enum RefreshOutput: Sendable, Equatable {
    /// A `getFeatureFlags` request, in `generation` (RF-4), with `X-Retry-Count` (A.1).
    case send(generation: UInt64, retryCount: Int)
    /// ST-1, LS-1: serve these flags (and adopt the `base_url` the server handed out, A.1).
    case serve(PushwooshAPI.FlagsResponse, baseURL: String?)
    case notify(AgentEvent)
    case complete(Waiter, RefreshError?)
}

/// The refresh state machine (docs/rules.md §3): triggers, the request in flight and its generation,
/// the throttle, the backoff and Retry-After, the RF-11 stop, and its two timers.
struct RefreshMachine: Sendable {
    /// RF-4: bumped when the User ID or the application changes; an answer for an older one is dropped.
    private(set) var generation: UInt64 = 0
    /// RF-9: at most one request, and who waits for it.
    private(set) var inFlight: InFlight?
    /// RF-11: automatic refreshes stopped after 401/403.
    private(set) var fatal = false
    /// RF-10: no automatic request before this (a `Retry-After` from the server).
    private var retryAfterUntil: Seconds?
    private(set) var consecutiveFailures = 0
    private(set) var lastRefreshAt: Date?
    /// What started the refresh of `lastRefreshAt`.
    private(set) var lastRefreshTrigger: RefreshTrigger?
    private(set) var lastRefreshError: RefreshError?
    private var lastRequestAt: Seconds?
    /// RF-3: how many requests were sent, so a registration can tell whether one followed it.
    private(set) var requestsSent: UInt64 = 0
    private var throttle: RefreshThrottle
    private var retryPolicy: RetryPolicy
    private var interval: Seconds
    /// RF-2: the next hourly request.
    private(set) var periodicDeadline: Seconds?
    /// RF-2, RF-12: the hourly slots: slot k lies at `anchor + k·interval + deviceOffset`,
    /// each refresh moved by its own jitter around its slot. Neither the offset nor the
    /// jitter accumulates: the device keeps to its hour (24 refreshes a day).
    private(set) var slots: PeriodicSlots?

    struct PeriodicSlots: Sendable, Equatable {
        /// Where the slots are counted from: the last request of another trigger.
        var anchor: Seconds
        /// The slot the periodic deadline is for (1: an hour after the anchor).
        var next: Int
    }
    /// RF-10: the next retry of a failed automatic request.
    private(set) var retryDeadline: Seconds?

    struct InFlight: Sendable {
        var generation: UInt64
        var trigger: RefreshTrigger
        var waiters: [Waiter]
    }

    init(flags: FeatureFlagSettings) {
        throttle = RefreshThrottle(window: flags.throttleWindow, disabled: flags.disableThrottle)
        retryPolicy = RetryPolicy(refreshInterval: flags.refreshInterval)
        interval = flags.refreshInterval
    }

    /// RF-6: where the window that answers a manual refresh from the stored flags ends.
    func throttleWindowEnd(now: Seconds, flagsValid: Bool) -> Seconds? {
        throttle.windowEnd(now: now, flagsValid: flagsValid)
    }

    /// Both timers' deadlines (nil when not armed).
    var deadlines: [Seconds?] { [periodicDeadline, retryDeadline] }

    // MARK: - Events

    /// RF-5: a client's refresh; `waiter` completes once, with nil on success.
    /// RF-6: answered from the stored flags inside the throttle window.
    mutating func manual(_ waiter: Waiter, _ world: RefreshWorld, _ random: inout some RandomNumberGenerator) -> [RefreshOutput] {
        fatal = false  // RF-11: a client's refresh lifts the stop.
        if inFlight == nil, throttle.answersFromStore(now: world.now.monotonic, flagsValid: world.flagsValid) {
            return [.notify(.refreshNotSent(error: nil)), .complete(waiter, nil)]
        }
        return request(.manual, waiter: waiter, world, &random)
    }

    /// An automatic trigger (RF-1..RF-4, RF-10): deferred while a `Retry-After` holds, to
    /// the moment it ends. RF-6: never throttled.
    mutating func automatic(_ trigger: RefreshTrigger, _ world: RefreshWorld, _ random: inout some RandomNumberGenerator) -> [RefreshOutput] {
        if let until = retryAfterUntil, world.now.monotonic < until, inFlight == nil {
            armRetry(at: max(retryDeadline ?? until, until))
            return []
        }
        return request(trigger, world, &random)
    }

    /// SE-1: the app moved to the foreground without a new session, or to the background.
    mutating func appStateChanged(_ world: RefreshWorld, _ random: inout some RandomNumberGenerator) {
        if world.active {
            schedulePeriodic(world, &random)
        } else {
            // RF-2 runs in the foreground only; a failed refresh is retried there too.
            periodicDeadline = nil
            retryDeadline = nil
        }
    }

    /// RF-4, ST-2: a new User ID or application. Answers sent before are dropped (the
    /// generation moves); the stop, the backoff and the throttle window start afresh.
    mutating func identityChanged(keepBackoff: Bool) {
        generation &+= 1
        fatal = false  // RF-11
        throttle.reset()
        guard !keepBackoff else { return }
        consecutiveFailures = 0
        retryDeadline = nil
        retryAfterUntil = nil
    }

    /// A configuration reload: new timings; RF-11's stop is lifted. Returns whether it was on.
    mutating func reconfigure(_ flags: FeatureFlagSettings) -> Bool {
        throttle.window = flags.throttleWindow
        throttle.disabled = flags.disableThrottle
        retryPolicy = RetryPolicy(refreshInterval: flags.refreshInterval)
        if flags.refreshInterval != interval { slots = nil }  // RF-2: a new period counts from the last request
        interval = flags.refreshInterval
        defer { fatal = false }
        return fatal
    }

    /// The retry (RF-10) and hourly (RF-2) timers.
    mutating func fireDueTimers(_ world: RefreshWorld, _ random: inout some RandomNumberGenerator) -> [RefreshOutput] {
        let now = world.now.monotonic
        var out: [RefreshOutput] = []
        if let d = retryDeadline, d <= now {
            retryDeadline = nil
            if world.active, !fatal { out += automatic(.retry, world, &random) }
        }
        if let d = periodicDeadline, d <= now {
            periodicDeadline = nil
            if world.active, !fatal {
                // The next slot first (the request below keeps it): the one after this, or,
                // when slots passed unseen (the app away, the device stalled), the first one
                // still ahead: a missed hour is made up once, as an iOS timer does, not per slot.
                if var s = slots {
                    let ahead = Int(((now - s.anchor - world.deviceOffset) / interval).rounded(.down)) + 1
                    s.next = max(s.next + 1, ahead)
                    slots = s
                }
                out += automatic(.periodic, world, &random)  // joins a request in flight (RF-9)
                if periodicDeadline == nil { schedulePeriodic(world, &random) }
            }
        }
        return out
    }

    /// RF-9: joins the request in flight, or sends one.
    mutating func request(_ trigger: RefreshTrigger, waiter: Waiter? = nil, _ world: RefreshWorld,
                          _ random: inout some RandomNumberGenerator) -> [RefreshOutput] {
        if inFlight != nil {
            if let waiter { inFlight?.waiters.append(waiter) }
            return []
        }
        guard world.canRequest else {
            // RF-8: no request is ever sent; `refresh` fails with code 0.
            let error = RefreshError(code: 0, message: "server URL does not end with \(PushwooshAPI.flagsPathSuffix): feature flags are not requested")
            return waiter.map { [.notify(.refreshNotSent(error: error)), .complete($0, error)] } ?? []
        }
        inFlight = InFlight(generation: generation, trigger: trigger, waiters: waiter.map { [$0] } ?? [])
        requestsSent += 1
        lastRequestAt = world.now.monotonic
        retryDeadline = nil
        // RF-2: a request of another trigger starts the slots afresh; the hourly one (and
        // its retries) keeps them. RF-10: a retry keeps the hourly deadline it was armed
        // against (`armRetry`: a minute before it at least); a new jitter could move it closer.
        switch trigger {
        case .retry where periodicDeadline != nil: break
        case .periodic, .retry: schedulePeriodic(world, &random)
        default: schedulePeriodic(world, &random, restart: true)
        }
        // A.1: the N-th automatic retry after N failures says so in `X-Retry-Count`.
        return [.send(generation: generation, retryCount: trigger == .retry ? consecutiveFailures : 0)]
    }

    /// The answer to the request sent in `sentGeneration`, already parsed.
    mutating func answered(_ result: Result<(PushwooshAPI.FlagsResponse, String?), PushwooshAPI.Failure>, generation sentGeneration: UInt64,
                           _ world: RefreshWorld, _ random: inout some RandomNumberGenerator) -> [RefreshOutput] {
        guard let finished = inFlight, finished.generation == sentGeneration else {
            preconditionFailure("RF-9: an answer of generation \(sentGeneration) that is not the request in flight: \(self)")
        }
        inFlight = nil
        if sentGeneration != generation {
            // RF-4: an answer for the previous user (or application) is dropped; whoever
            // waited gets the answer of a request for the current one.
            var out = request(.userChange, world, &random)
            if inFlight == nil {
                out += finished.waiters.map { .complete($0, RefreshError(code: 0, message: "request not sent")) }
            } else {
                inFlight?.waiters.append(contentsOf: finished.waiters)
            }
            return out
        }
        let now = world.now
        lastRefreshAt = now.wall
        lastRefreshTrigger = finished.trigger
        var out: [RefreshOutput]
        let error: RefreshError?
        switch result {
        case .success(let (response, baseURL)):
            error = nil
            consecutiveFailures = 0
            lastRefreshError = nil
            retryDeadline = nil
            retryAfterUntil = nil
            // ST-5: only complete responses open a throttle window (RF-6).
            if !response.partial { throttle.recordCompleteResponse(at: now.monotonic) }
            out = [.notify(.refreshSucceeded(trigger: finished.trigger, flagCount: response.flags.count, partial: response.partial)),
                   .serve(response, baseURL: baseURL)]
        case .failure(let failure):
            let failed = RefreshError(code: failure.code, message: failure.message)
            error = failed
            consecutiveFailures += 1
            lastRefreshError = failed
            var retryIn: Seconds?
            // RF-10: the server's Retry-After holds every automatic trigger, the hourly one too.
            retryAfterUntil = failure.retryAfter.map { now.monotonic + $0 }
            if failure.isFatal {
                fatal = true  // RF-11
                periodicDeadline = nil
                retryDeadline = nil
            } else if world.active {
                // RF-10: retry automatic refreshes with capped backoff and jitter.
                let delay = retryPolicy.delay(failures: consecutiveFailures, retryAfter: failure.retryAfter,
                                              unit: Double.random(in: 0..<1, using: &random))
                retryIn = armRetry(at: now.monotonic + delay) - now.monotonic
            }
            out = [.notify(.refreshFailed(trigger: finished.trigger, error: failed, retryIn: retryIn))]
        }
        return out + finished.waiters.map { .complete($0, error) }
    }

    /// RF-2, RF-12: the next hourly refresh: the next slot, at its place in the hour (the
    /// anchor plus whole periods plus this device's offset), moved by a jitter of its own of
    /// at most 1% of the period either way. `restart`: the slots count from now (a request of
    /// another trigger was just sent).
    mutating func schedulePeriodic(_ world: RefreshWorld, _ random: inout some RandomNumberGenerator, restart: Bool = false) {
        guard world.active, !fatal else {
            periodicDeadline = nil
            return
        }
        let now = world.now.monotonic
        let slots = restart ? PeriodicSlots(anchor: now, next: 1) : self.slots ?? PeriodicSlots(anchor: lastRequestAt ?? now, next: 1)
        self.slots = slots
        let jitter = (Double.random(in: 0..<1, using: &random) * 2 - 1) * interval * Self.jitterShare
        // A slot that passed while the app was away is due at once (fireDueTimers then skips
        // to the first slot ahead).
        periodicDeadline = max(now, slots.anchor + Double(slots.next) * interval + world.deviceOffset + jitter)
        if let retry = retryDeadline { armRetry(at: retry) }
    }

    /// RF-10: arms the retry at `deadline`, unless the hourly refresh (RF-2) comes less than the
    /// floor after it: retries run until the next scheduled trigger, which then takes the retry's
    /// place, so that the two never go out less than a minute apart (a backoff grown to near
    /// the hour, counted from a failure, lands next to the slot). Returns when the next
    /// automatic request is due.
    @discardableResult
    private mutating func armRetry(at deadline: Seconds) -> Seconds {
        if let hour = periodicDeadline, hour - retryPolicy.floor < deadline, deadline <= hour {
            retryDeadline = nil
            return max(hour, retryAfterUntil ?? hour)
        }
        retryDeadline = deadline
        return deadline
    }

    /// RF-12: the jitter around each slot, as a share of the period (either way).
    static let jitterShare = 0.01

    /// RF-12: a stable per-device place in the period, from 1% to 9% of it (with the jitter,
    /// each refresh lies within 10% past its hour).
    static func deviceOffset(hwid: String, period: Seconds) -> Seconds {
        (jitterShare + Double(fnv1a(hwid) % 10_000) / 10_000 * 0.08) * period
    }
}

// MARK: - The refresh machine inside the agent

/// The refresh machine inside the agent: what it is told about the rest (`RefreshWorld`),
/// and its outputs turned into actions (requests, served flags, notifications).
extension AgentMachine {
    /// The world as the refresh machine sees it now.
    var refreshWorld: RefreshWorld {
        RefreshWorld(now: now, active: session.appState == .active, flagsValid: validity.served != nil,
                     canRequest: PushwooshAPI.supportsFeatureFlags(baseURL: baseURL),
                     deviceOffset: RefreshMachine.deviceOffset(hwid: state.hwid, period: settings.flags.refreshInterval))
    }

    /// RF-6: when a manual refresh at `now` would be answered from the stored flags, the
    /// device time at which the throttle window ends; nil when it would be sent.
    public func throttleWindowEnd(now: Now) -> Date? {
        guard refresh.inFlight == nil,
              let end = refresh.throttleWindowEnd(now: now.monotonic, flagsValid: servedFlags(at: now) != nil) else { return nil }
        return now.wall.addingTimeInterval(end - now.monotonic)
    }

    /// RF-5: refreshes on demand; `waiter` completes once, with nil on success.
    /// RF-6: answered from the stored flags inside the throttle window.
    public mutating func refresh(_ waiter: Waiter, now: Now) -> [AgentAction] {
        let out = begin(now)
        let world = refreshWorld
        let steps = refresh.manual(waiter, world, &random)
        return finish(out + perform(steps))
    }

    /// An automatic trigger (RF-1..RF-4, RF-10).
    mutating func automaticRefresh(_ trigger: RefreshTrigger) -> [AgentAction] {
        let world = refreshWorld
        let steps = refresh.automatic(trigger, world, &random)
        return perform(steps)
    }

    /// RF-9: joins the request in flight, or sends one (RF-4 after a new User ID, a reload).
    mutating func requestFlags(_ trigger: RefreshTrigger) -> [AgentAction] {
        let world = refreshWorld
        let steps = refresh.request(trigger, world, &random)
        return perform(steps)
    }

    mutating func refreshTimers() -> [AgentAction] {
        let world = refreshWorld
        let steps = refresh.fireDueTimers(world, &random)
        return perform(steps)
    }

    mutating func flagsAnswered(_ outcome: HTTPOutcome, generation: UInt64) -> [AgentAction] {
        let result = PushwooshAPI.classify(outcome).flatMap { success -> Result<(PushwooshAPI.FlagsResponse, String?), PushwooshAPI.Failure> in
            PushwooshAPI.parseFlags(success.response).map { ($0, success.baseURL) }
        }
        let world = refreshWorld
        let steps = refresh.answered(result, generation: generation, world, &random)
        return perform(steps)
    }

    /// Turns the refresh machine's outputs into actions, in order.
    private mutating func perform(_ steps: [RefreshOutput]) -> [AgentAction] {
        var out: [AgentAction] = []
        for step in steps {
            switch step {
            case .send(let generation, let retryCount):
                out.append(.send(request(.getFeatureFlags, retryCount: retryCount), .flags(generation: generation)))
            case .serve(let response, let newBaseURL):
                out += serve(response)
                out += adoptBaseURL(newBaseURL)
            case .notify(let event):
                out.append(.notify(event))
            case .complete(let waiter, let error):
                out.append(.complete(waiter, error))
            }
        }
        return out
    }

    /// ST-1, ST-5, LS-1: serves a response; only a complete one is written.
    private mutating func serve(_ response: PushwooshAPI.FlagsResponse) -> [AgentAction] {
        let previous = validity.served?.snapshot.flags ?? [:]
        let snapshot = FlagSnapshot(flags: response.flags, receivedAt: now.wall, applicationCode: settings.server.applicationCode,
                                    userId: userId, partial: response.partial)
        validity.serve(snapshot, now: now)
        if !response.partial { state.flags = snapshot }
        let changed = FlagSnapshot.changedKeys(from: previous, to: response.flags)
        return changed.isEmpty ? [] : [.notify(.flagsChanged(reason: .refresh, keys: changed))]  // LS-1
    }

    /// A.1: switch only when no server URL is configured, and only from a success.
    private mutating func adoptBaseURL(_ newBaseURL: String?) -> [AgentAction] {
        guard settings.server.serverURL == nil, let newBaseURL, newBaseURL != state.baseURL else { return [] }
        state.baseURL = newBaseURL
        return [.notify(.baseURLChanged(newBaseURL))]
    }
}
