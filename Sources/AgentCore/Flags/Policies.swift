import FoundationEssentials

// Small state machines the agent composes. Each is a struct, given `now`, with no side
// effects (STYLE rule 2).

/// SE-1, RF-1: the app state and when sessions start.
struct SessionMachine: Sendable {
    private(set) var appState: AppState = .background
    private(set) var sessionStartedAt: Seconds?
    private var backgroundSince: Seconds?
    private var hasBeenActive = false

    /// Moves to `state` at `now`; returns whether a new session started.
    mutating func transition(to state: AppState, now: Seconds, sessionTimeout: Seconds) -> Bool {
        switch (appState, state) {
        case (.active, .active):
            return false
        case (.active, .background):
            appState = .background
            backgroundSince = now
            return false
        case (.background, .background):
            return false
        case (.background, .active):
            appState = .active
            defer { backgroundSince = nil; hasBeenActive = true }
            // SE-1: the first activation, or a return after at least `sessionTimeout` away.
            if !hasBeenActive || now - (backgroundSince ?? now) >= sessionTimeout {
                sessionStartedAt = now
                return true
            }
            return false
        }
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

/// IM-3, IM-4: one impression per flag, rule and state per session (and per user).
struct ImpressionLedger: Sendable {
    struct Key: Hashable, Sendable {
        var flag: String
        var rule: String
        var enabled: Bool
    }

    private var sent: Set<Key> = []

    /// Whether an impression for `key` should be sent now; records it as sent.
    mutating func claim(_ key: Key) -> Bool { sent.insert(key).inserted }
    /// IM-4: a failed send is forgotten, so the next call sends again.
    mutating func release(_ key: Key) { sent.remove(key) }
    mutating func reset() { sent.removeAll() }
}

/// The flags being served and their age (ST-1, ST-3). Age is measured on the wall clock
/// from receipt and also guarded by the monotonic clock since it was taken in, so neither
/// a backward wall-clock step nor a forward one keeps flags alive past their lifetime.
struct ServedFlags: Sendable {
    var snapshot: FlagSnapshot
    var source: FlagSource
    /// Monotonic time at which `ageAtBase` was measured.
    var monotonicBase: Seconds
    var ageAtBase: Seconds

    func age(monotonic: Seconds, wall: Date) -> Seconds {
        max(wall.timeIntervalSince(snapshot.receivedAt), ageAtBase + (monotonic - monotonicBase))
    }

    /// Whether the flags are past `lifetime`, consistent with `expiresAt` to the last bit
    /// (the expiry timer must never find flags alive at its own deadline).
    func isExpired(lifetime: Seconds, monotonic: Seconds, wall: Date) -> Bool {
        monotonic >= expiresAt(lifetime: lifetime) || wall.timeIntervalSince(snapshot.receivedAt) >= lifetime
    }

    /// The monotonic time at which the flags expire unless the wall clock jumps ahead.
    func expiresAt(lifetime: Seconds) -> Seconds { monotonicBase + (lifetime - ageAtBase) }
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
