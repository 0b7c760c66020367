import FoundationEssentials

/// IM-3: what makes two impressions the same: the flag, its rule and its state.
public struct Impression: Hashable, Sendable {
    public var flag: String
    public var rule: String
    public var enabled: Bool

    public init(flag: String, rule: String, enabled: Bool) {
        self.flag = flag
        self.rule = rule
        self.enabled = enabled
    }
}

/// IM-3, IM-4: one impression per flag, rule and state per session (and per user).
struct ImpressionLedger: Sendable {
    private var sent: Set<Impression> = []

    /// IM-1, IM-3: the impression to send for `flag` (the flag served for the key, if any):
    /// none without a flag, none when one was sent this session. Records it as sent.
    mutating func log(_ flag: FeatureFlag?) -> Impression? {
        guard let flag else { return nil }
        let impression = Impression(flag: flag.key, rule: flag.ruleId, enabled: flag.isEnabled)
        return sent.insert(impression).inserted ? impression : nil
    }

    /// IM-4: a failed send is forgotten, so the next call sends again, unless the set
    /// started afresh since it was sent (`sentIn` is not `current`: a new user or application).
    mutating func answered(_ impression: Impression, failed: Bool, sentIn generation: UInt64, current: UInt64) {
        if failed, generation == current { sent.remove(impression) }
    }

    /// IM-3: a new session or user starts a fresh set.
    mutating func reset() { sent.removeAll() }
}

extension AgentMachine {
    /// IM-1..IM-4: sends `PW_FeatureFlagImpression` once per flag, rule and state per
    /// session. Returns whether one was sent (false: no flag, or already sent).
    public mutating func logImpression(_ key: String, now: Now) -> (logged: Bool, actions: [AgentAction]) {
        var out = begin(now)
        guard let impression = impressions.log(validity.served?.snapshot.flags[key]) else { return (false, finish(out)) }
        out += postEvent("PW_FeatureFlagImpression", attributes: [  // IM-2
            "flag_key": .string(impression.flag), "rule_id": .string(impression.rule), "enabled": .bool(impression.enabled),
        ], call: .postEvent(impression: impression, generation: refresh.generation, waiter: nil))
        return (true, finish(out))
    }

    /// `postEvent` (A.2); `waiter`, when given, completes with the call's error.
    public mutating func postEvent(_ event: String, attributes: [String: JSONValue], waiter: Waiter?, now: Now) -> [AgentAction] {
        let out = begin(now)
        let call = Call.postEvent(impression: nil, generation: refresh.generation, waiter: waiter)
        return finish(out + postEvent(event, attributes: attributes, call: call))
    }

    private func postEvent(_ event: String, attributes: [String: JSONValue], call: Call) -> [AgentAction] {
        let utc = Int(now.wall.timeIntervalSince1970)
        return [.send(request(.postEvent, fields: [
            "event": .string(event), "attributes": .object(attributes),
            "timestampUTC": .number(Double(utc)),
            "timestampCurrent": .number(Double(utc + settings.deviceInfo.timezoneOffset)),
        ]), call)]
    }

    mutating func postEventAnswered(_ outcome: HTTPOutcome, impression: Impression?, generation: UInt64, waiter: Waiter?) -> [AgentAction] {
        let error = PushwooshAPI.classify(outcome).failure
        if let impression {
            impressions.answered(impression, failed: error != nil, sentIn: generation, current: refresh.generation)  // IM-4
        }
        var out: [AgentAction] = [.notify(.callFinished(method: .postEvent, error: error))]
        if let waiter { out.append(.complete(waiter, error)) }
        return out
    }
}
