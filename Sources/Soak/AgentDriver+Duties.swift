import AgentCore
import AgentWire
import Foundation

/// The coverage plan's duties (CoveragePlan), as one device's driver does them. A duty that
/// cannot be done yet (no flags to keep, a refresh that failed) is tried again at the next act.
extension AgentDriver {
    /// Does `duty`; true when it is done.
    func perform(_ duty: CoveragePlan.Duty) -> Bool {
        switch duty {
        case .expiry: return startExpiry()
        case .userSwitch:
            guard setUser() else { return false }
            impression()
            return true
        case .restartOnCache:
            guard let s = observeStatus() else { return false }
            guard s.flagsAgeSeconds != nil, !s.flagsPartial else { return fetchFlags() }
            restart()
            return true
        case .throttle:
            // The first opens a window (RF-6) if it is sent and succeeds; the second falls in it.
            guard let first = refresh(), first.error == nil else { return false }
            guard let second = refresh() else { return false }
            return !second.sent && second.throttledUntil != nil
        case .retryAfter, .outage:
            return true
        }
    }

    /// A planned fault the chaos thread armed for this device: a request into it now (the
    /// hourly one would come too, if the device is in the foreground).
    func meet() {
        if !active { goActive() }
        refresh()
    }

    /// Gets flags when there are none: a session start in the background, else `refresh`. Never done.
    func fetchFlags() -> Bool {
        if active { refresh() } else { goActive() }
        return false
    }

    /// ST-3: once the device holds full flags, it goes to the background and stays there, with
    /// nothing that refreshes, until a minute past their lifetime; the clock stops a minute
    /// before and a minute after for the two looks (`keepForExpiry`).
    func startExpiry() -> Bool {
        guard var s = observeStatus() else { return false }
        if s.flagsAgeSeconds == nil || s.flagsPartial {
            // A request now; the clock waits (the driver holds the gate) a few seconds for its answer.
            _ = fetchFlags()
            let giveUp = now() + 3
            while now() < giveUp, s.flagsAgeSeconds == nil || s.flagsPartial {
                usleep(50_000)
                guard let again = observeStatus(record: false) else { return false }
                s = again
            }
            guard s.flagsAgeSeconds != nil, !s.flagsPartial else { return false }
        }
        if active { goBackground() }
        backgroundUntil = nil
        guard !active, let dated = observeStatus(), let age = dated.flagsAgeSeconds else { return false }
        let received = ctx.timeline.device(dated.sent) - age
        let lifetime = ctx.options.timings.lifetime
        expiry = (dated, received + lifetime - 60, received + lifetime + 60, nil)
        ctx.board.silent(agent: index, true)
        ctx.board.hold(agent: index, at: received + lifetime - 60)
        ctx.board.hold(agent: index, at: received + lifetime + 60)
        nextRestart = .infinity
        return true
    }

    /// An act while the expiry duty runs: a look when the clock waits for one, else only what
    /// sends no flags request (observations, impressions, property reads).
    func keepForExpiry() {
        guard let duty = expiry else { return }
        if let at = ctx.board.due(agent: index, deviceNow: ctx.timeline.deviceNow()) {
                defer { ctx.board.release(agent: index, at: at) }
            guard let status = observeStatus(), let flag = observeFlag(RunContext.trackedFlag) else {
                ctx.recorder.note("agent \(index): the expiry look at \(iso8601(at)) got no answer")
                return endExpiry()
            }
            if at == duty.before {
                expiry?.first = (status, flag)
            } else {
                if let first = duty.first {
                    let probe = ExpiryProbe(agent: index, dated: duty.dated, beforeStatus: first.0, beforeFlag: first.1,
                                            afterStatus: status, afterFlag: flag)
                    ctx.recorder.state.withLock { $0.expiryProbes.append(probe) }
                }
                endExpiry()
            }
            return
        }
        switch rng.unit() {
        case ..<0.6: observe()
        case ..<0.8: impression()
        default: property()
        }
    }

    func endExpiry() {
        expiry = nil
        ctx.board.silent(agent: index, false)
        ctx.board.releaseAll(agent: index)
        backgroundUntil = ctx.timeline.deviceNow()
        scheduleRestart()
    }
}
