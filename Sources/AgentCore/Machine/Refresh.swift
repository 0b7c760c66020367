import FoundationEssentials

/// The refresh state machine's memory (SPEC §3): the request in flight and its generation,
/// the RF-11 stop, the backoff and the two timers.
struct RefreshState: Sendable {
    /// RF-4: bumped when the User ID or the application changes; an answer for an older one is dropped.
    var generation: UInt64 = 0
    /// RF-9: at most one request, and who waits for it.
    var inFlight: InFlight?
    /// RF-11: automatic refreshes stopped after 401/403.
    var fatal = false
    /// RF-10: no automatic request before this (a `Retry-After` from the server).
    var retryAfterUntil: Seconds?
    var consecutiveFailures = 0
    var lastRefreshAt: Date?
    var lastRefreshError: RefreshError?
    var lastRequestAt: Seconds?
    /// RF-3: the `AgentMachine.sequence` of the last request sent.
    var lastRequestSequence: UInt64?
    var throttle: RefreshThrottle
    var retryPolicy: RetryPolicy
    /// RF-2: the next hourly request.
    var periodicDeadline: Seconds?
    /// RF-10: the next retry of a failed automatic request.
    var retryDeadline: Seconds?

    struct InFlight: Sendable {
        var generation: UInt64
        var trigger: RefreshTrigger
        var waiters: [Waiter]
    }

    init(flags: FeatureFlagSettings) {
        throttle = RefreshThrottle(window: flags.throttleWindow, disabled: flags.disableThrottle)
        retryPolicy = RetryPolicy(refreshInterval: flags.refreshInterval)
    }

    mutating func configure(_ flags: FeatureFlagSettings) {
        throttle.window = flags.throttleWindow
        throttle.disabled = flags.disableThrottle
        retryPolicy = RetryPolicy(refreshInterval: flags.refreshInterval)
    }
}

extension AgentMachine {
    /// RF-5: refreshes on demand; `waiter` completes once, with nil on success.
    /// RF-6: answered from the stored flags inside the throttle window.
    public mutating func refresh(_ waiter: Waiter, now: Now) -> [AgentAction] {
        var out = begin(now)
        refresh.fatal = false  // RF-11: a client's refresh lifts the stop.
        if refresh.inFlight == nil, refresh.throttle.answersFromStore(now: now.monotonic, flagsValid: validity.served != nil) {
            out.append(.complete(waiter, nil))
        } else {
            out += requestFlags(.manual, waiter: waiter)
        }
        return finish(out)
    }

    /// An automatic trigger (RF-1..RF-3, RF-10): deferred while a `Retry-After` holds, to
    /// the moment it ends.
    mutating func automaticRefresh(_ trigger: RefreshTrigger) -> [AgentAction] {
        if let until = refresh.retryAfterUntil, now.monotonic < until, refresh.inFlight == nil {
            refresh.retryDeadline = max(refresh.retryDeadline ?? until, until)
            return []
        }
        return requestFlags(trigger)
    }

    /// RF-9: joins the request in flight, or sends one.
    mutating func requestFlags(_ trigger: RefreshTrigger, waiter: Waiter? = nil) -> [AgentAction] {
        if refresh.inFlight != nil {
            if let waiter { refresh.inFlight?.waiters.append(waiter) }
            return []
        }
        guard PushwooshAPI.supportsFeatureFlags(baseURL: baseURL) else {
            // RF-8: no request is ever sent; `refresh` fails with code 0.
            let error = RefreshError(code: 0, message: "server URL does not end with \(PushwooshAPI.flagsPathSuffix): feature flags are not requested")
            return waiter.map { [.complete($0, error)] } ?? []
        }
        refresh.inFlight = RefreshState.InFlight(generation: refresh.generation, trigger: trigger, waiters: waiter.map { [$0] } ?? [])
        sequence += 1
        refresh.lastRequestSequence = sequence
        refresh.lastRequestAt = now.monotonic
        refresh.retryDeadline = nil
        schedulePeriodic()
        // A.1: the N-th automatic retry after N failures says so in `X-Retry-Count`.
        let retryCount = trigger == .retry ? refresh.consecutiveFailures : 0
        return [.send(request(.getFeatureFlags, retryCount: retryCount), .flags(generation: refresh.generation))]
    }

    mutating func flagsAnswered(_ outcome: HTTPOutcome, generation sentGeneration: UInt64) -> [AgentAction] {
        guard let finished = refresh.inFlight else {
            preconditionFailure("a flags answer (generation \(sentGeneration)) with no request in flight: \(refresh)")
        }
        precondition(finished.generation == sentGeneration,
                     "RF-9: the answer of generation \(sentGeneration) is not the request in flight: \(refresh)")
        refresh.inFlight = nil
        if sentGeneration != refresh.generation {
            // RF-4: an answer for the previous user (or application) is dropped; whoever
            // waited gets the answer of a request for the current one.
            var out = requestFlags(.userChange)
            if refresh.inFlight == nil {
                let error = RefreshError(code: 0, message: "request not sent")
                out += finished.waiters.map { .complete($0, error) }
            } else {
                refresh.inFlight?.waiters.append(contentsOf: finished.waiters)
            }
            return out
        }
        let result = PushwooshAPI.classify(outcome).flatMap { success -> Result<(PushwooshAPI.FlagsResponse, String?), PushwooshAPI.Failure> in
            PushwooshAPI.parseFlags(success.response).map { ($0, success.baseURL) }
        }
        var out: [AgentAction]
        let error: RefreshError?
        switch result {
        case .success(let (response, newBaseURL)):
            error = nil
            out = applyFlags(response, trigger: finished.trigger)
            out += adoptBaseURL(newBaseURL)
        case .failure(let failure):
            error = RefreshError(code: failure.code, message: failure.message)
            out = refreshFailed(failure, trigger: finished.trigger)
        }
        return out + finished.waiters.map { .complete($0, error) }
    }

    private mutating func applyFlags(_ response: PushwooshAPI.FlagsResponse, trigger: RefreshTrigger) -> [AgentAction] {
        let previous = validity.served?.snapshot.flags ?? [:]
        let snapshot = FlagSnapshot(flags: response.flags, receivedAt: now.wall, applicationCode: settings.server.applicationCode,
                                    userId: userId, partial: response.partial)
        validity.serve(snapshot, now: now)
        refresh.consecutiveFailures = 0
        refresh.lastRefreshAt = now.wall
        refresh.lastRefreshError = nil
        refresh.retryDeadline = nil
        refresh.retryAfterUntil = nil
        if !response.partial {
            // ST-5: only complete responses are written, and only they open a throttle window (RF-6).
            state.flags = snapshot
            refresh.throttle.recordCompleteResponse(at: now.monotonic)
        }
        var out: [AgentAction] = [.notify(.refreshSucceeded(trigger: trigger, flagCount: response.flags.count, partial: response.partial))]
        let changed = FlagSnapshot.changedKeys(from: previous, to: response.flags)
        if !changed.isEmpty { out.append(.notify(.flagsChanged(reason: .refresh, keys: changed))) }  // LS-1
        return out
    }

    private mutating func refreshFailed(_ failure: PushwooshAPI.Failure, trigger: RefreshTrigger) -> [AgentAction] {
        refresh.consecutiveFailures += 1
        refresh.lastRefreshAt = now.wall
        let error = RefreshError(code: failure.code, message: failure.message)
        refresh.lastRefreshError = error
        var retryIn: Seconds?
        if failure.isFatal {
            refresh.fatal = true  // RF-11
            refresh.periodicDeadline = nil
            refresh.retryDeadline = nil
        } else if session.appState == .active {
            // RF-10: retry automatic refreshes with capped backoff and jitter.
            let delay = refresh.retryPolicy.delay(failures: refresh.consecutiveFailures, retryAfter: failure.retryAfter,
                                                  unit: Double.random(in: 0..<1, using: &random))
            refresh.retryDeadline = now.monotonic + delay
            retryIn = delay
        }
        // RF-10: the server's Retry-After holds every automatic trigger, the hourly one too.
        refresh.retryAfterUntil = failure.retryAfter.map { now.monotonic + $0 }
        return [.notify(.refreshFailed(trigger: trigger, error: error, retryIn: retryIn))]
    }

    /// A.1: switch only when no server URL is configured, and only from a success.
    private mutating func adoptBaseURL(_ newBaseURL: String?) -> [AgentAction] {
        guard settings.server.serverURL == nil, let newBaseURL, newBaseURL != state.baseURL else { return [] }
        state.baseURL = newBaseURL
        return [.notify(.baseURLChanged(newBaseURL))]
    }

    /// RF-2, RF-12: the next hourly refresh, offset by a stable per-device amount plus a
    /// little jitter, together within 10% of the period.
    mutating func schedulePeriodic(after floor: Seconds? = nil) {
        guard session.appState == .active, !refresh.fatal else {
            refresh.periodicDeadline = nil
            return
        }
        let interval = settings.flags.refreshInterval
        let anchor = max(refresh.lastRequestAt ?? now.monotonic, floor ?? -.infinity)
        let offset = Self.deviceOffset(hwid: state.hwid, period: interval)
        let jitter = Double.random(in: 0..<1, using: &random) * interval * 0.02
        refresh.periodicDeadline = max(now.monotonic, anchor + interval + offset + jitter)
    }

    /// RF-12: a stable per-device share of the period, below 8% (jitter adds up to 2%).
    public static func deviceOffset(hwid: String, period: Seconds) -> Seconds {
        Double(fnv1a(hwid) % 10_000) / 10_000 * period * 0.08
    }
}

/// RF-6: at most one `refresh` request per window while stored flags are valid.
struct RefreshThrottle: Sendable {
    var window: Seconds
    var disabled: Bool
    /// When the last complete successful response arrived. Partial responses do not
    /// open a window (ST-5); failures do not either, so a client can retry at once.
    private(set) var windowOpenedAt: Seconds?

    init(window: Seconds, disabled: Bool) {
        self.window = window
        self.disabled = disabled
    }

    mutating func recordCompleteResponse(at now: Seconds) { windowOpenedAt = now }
    mutating func reset() { windowOpenedAt = nil }

    /// Whether a manual refresh at `now` may be answered from the stored flags.
    func answersFromStore(now: Seconds, flagsValid: Bool) -> Bool {
        guard !disabled, flagsValid, let opened = windowOpenedAt else { return false }
        return now - opened < window
    }
}

/// RF-10: capped exponential backoff with jitter for failed automatic refreshes.
struct RetryPolicy: Sendable {
    /// Never more often than this (a minute, or the refresh period when that is shorter).
    var floor: Seconds
    /// At most this: the next scheduled trigger comes by then anyway.
    var cap: Seconds

    init(refreshInterval: Seconds) {
        floor = min(60, refreshInterval)
        cap = max(floor, refreshInterval)
    }

    /// The delay before retry number `failures` (1-based); `unit` in [0, 1) is the jitter draw.
    func delay(failures: Int, retryAfter: Seconds?, unit: Double) -> Seconds {
        let exponent = Double(min(max(failures - 1, 0), 20))
        let base = min(cap, floor * Double(1 << Int(exponent)))
        // Full jitter in the upper half keeps devices apart without ever going below the floor.
        let jittered = max(floor, base * (0.5 + 0.5 * unit))
        if let retryAfter { return max(jittered, retryAfter) }
        return jittered
    }
}

/// Stable 64-bit FNV-1a, for per-device offsets (RF-12). Never Swift's seeded `hashValue`.
func fnv1a(_ text: String) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in text.utf8 {
        hash ^= UInt64(byte)
        hash = hash &* 0x0000_0100_0000_01b3
    }
    return hash
}
