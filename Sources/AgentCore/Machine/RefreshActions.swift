import FoundationEssentials

/// The refresh machine inside the agent: what it is told about the rest (`RefreshWorld`),
/// and its outputs turned into actions (requests, served flags, notifications).
extension AgentMachine {
    /// The world as the refresh machine sees it now.
    var refreshWorld: RefreshWorld {
        RefreshWorld(now: now, active: session.appState == .active, flagsValid: validity.served != nil,
                     canRequest: PushwooshAPI.supportsFeatureFlags(baseURL: baseURL),
                     deviceOffset: RefreshMachine.deviceOffset(hwid: state.hwid, period: settings.flags.refreshInterval))
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

    /// RF-12: a stable per-device share of the period, below 8% (jitter adds up to 2%).
    public static func deviceOffset(hwid: String, period: Seconds) -> Seconds {
        RefreshMachine.deviceOffset(hwid: hwid, period: period)
    }
}
