import FoundationEssentials

/// Validity and expiry of the flags served (docs/rules.md §2): what is served, from where, and until when.
struct Validity: Sendable {
    /// The flags served now; may be past their lifetime between events (reads check, ST-3).
    private(set) var served: ServedFlags?

    /// ST-3: the flags served at `now`, nil once they are `lifetime` old. A read: changes nothing.
    func valid(at now: Now, lifetime: Seconds) -> ServedFlags? {
        guard let served, !served.isExpired(lifetime: lifetime, monotonic: now.monotonic, wall: now.wall) else { return nil }
        return served
    }

    /// The expiry timer: when the served flags expire unless the wall clock jumps ahead.
    func deadline(lifetime: Seconds) -> Seconds? { served?.expiresAt(lifetime: lifetime) }

    /// ST-1: flags just received are served from the network, aged 0.
    mutating func serve(_ snapshot: FlagSnapshot, now: Now) {
        served = ServedFlags(snapshot: snapshot, source: .network, monotonicBase: now.monotonic, ageAtBase: 0)
    }

    /// ST-1: stored flags read at start, aged by the wall clock since their receipt.
    mutating func serveStored(_ snapshot: FlagSnapshot, age: Seconds, now: Now) {
        served = ServedFlags(snapshot: snapshot, source: .cache, monotonicBase: now.monotonic, ageAtBase: age)
    }

    /// Stops serving; returns what was served.
    mutating func stop() -> ServedFlags? {
        defer { served = nil }
        return served
    }
}

extension AgentMachine {
    /// ST-2, ST-3 at start: stored flags of another application or user, partial ones, and
    /// ones past their lifetime (or received "in the future") are dropped; the rest are served.
    mutating func loadStoredFlags() {
        guard let stored = state.flags else { return }
        let wallAge = now.wall.timeIntervalSince(stored.receivedAt)
        if !stored.belongs(toApplication: settings.server.applicationCode, user: userId) || stored.partial {
            state.flags = nil  // ST-2: never served to another user or application.
        } else if wallAge < 0 || wallAge >= settings.flags.storedFlagsLifetime {
            // ST-3. A receipt time in the future means the wall clock went back: the age
            // cannot be known, so the flags are not trusted.
            state.flags = nil
        } else {
            validity.serveStored(stored, age: wallAge, now: now)
        }
    }

    /// ST-3, LS-3: the expiry timer's work, done at the start of every event, so a read never
    /// has to: flags past their lifetime stop being served, are removed from disk, and
    /// subscribers hear why.
    mutating func expireIfDue() -> [AgentAction] {
        guard validity.served != nil, validity.valid(at: now, lifetime: settings.flags.storedFlagsLifetime) == nil else { return [] }
        return stopServing(.expired)
    }

    /// LS-3, ST-2, ST-3: stops serving the current flags (memory and disk) and says why.
    mutating func stopServing(_ reason: FlagChangeReason) -> [AgentAction] {
        state.flags = nil
        guard let current = validity.stop() else { return [] }
        return [.notify(.flagsChanged(reason: reason, keys: current.snapshot.flags.keys.sorted()))]
    }
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
