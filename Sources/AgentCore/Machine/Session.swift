import FoundationEssentials

/// SE-1, RF-1: the app state and when sessions start.
struct SessionMachine: Sendable {
    private(set) var appState: AppState = .background
    private(set) var sessionStartedAt: Seconds?
    private var backgroundSince: Seconds?
    private var hasBeenActive = false
    /// `applicationOpen` is sent once per process, at the first session (A.2).
    var applicationOpenSent = false

    /// SE-1: when the session ends if the app stays in the background: from then on a
    /// return to the foreground starts a new one. Nil while active or before any session.
    /// Nothing fires then (the end is noticed at the return); `advanceClock` reports it.
    func endsAt(sessionTimeout: Seconds) -> Seconds? {
        guard appState == .background, hasBeenActive, let backgroundSince else { return nil }
        return backgroundSince + sessionTimeout
    }

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

extension AgentMachine {
    /// SE-1: moves between active and background; a new session starts a refresh (RF-1).
    /// Returns whether a session started.
    public mutating func setAppState(_ newState: AppState, now: Now) -> (sessionStarted: Bool, actions: [AgentAction]) {
        let out = begin(now)
        let (started, actions) = appStateChanged(to: newState)
        return (started, finish(out + actions))
    }

    mutating func appStateChanged(to newState: AppState) -> (started: Bool, actions: [AgentAction]) {
        let started = session.transition(to: newState, now: now.monotonic, sessionTimeout: settings.flags.sessionTimeout)
        switch session.appState {
        case .background:
            let world = refreshWorld
            refresh.appStateChanged(world, &random)  // RF-2: in the foreground only
            return (started, [])
        case .active:
            guard started else {
                let world = refreshWorld
                refresh.appStateChanged(world, &random)
                return (false, [])
            }
            impressions.reset()  // IM-3: per session.
            var out: [AgentAction] = []
            if !session.applicationOpenSent {
                session.applicationOpenSent = true
                out.append(.send(request(.applicationOpen, fields: deviceFields), .applicationOpen))
            }
            if !refresh.fatal { out += automaticRefresh(.sessionStart) }  // RF-1
            return (true, out)
        }
    }
}
