import FoundationEssentials

// The refresh machine's policies, each a small value: the throttle (RF-6), the backoff
// (RF-10) and the per-device offset's hash (RF-12).

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
        windowEnd(now: now, flagsValid: flagsValid) != nil
    }

    /// The end of the window that answers a manual refresh at `now` from the stored flags;
    /// nil when such a refresh would be sent.
    func windowEnd(now: Seconds, flagsValid: Bool) -> Seconds? {
        guard !disabled, flagsValid, let opened = windowOpenedAt, now - opened < window else { return nil }
        return opened + window
    }
}

/// RF-10: capped exponential backoff with jitter for failed automatic refreshes.
struct RetryPolicy: Sendable {
    /// Never more often than this (a minute, or the refresh period when that is shorter).
    var floor: Seconds
    /// At most this: the next scheduled trigger comes by then anyway. Counted from a failure,
    /// not from the slot, so a delay near the cap can land just before the hourly refresh;
    /// `RefreshMachine.armRetry` leaves such a retry to it.
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
