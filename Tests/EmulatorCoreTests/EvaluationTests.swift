import AgentCore
import EmulatorCore
import Foundation
import Testing

let t0 = Date(timeIntervalSince1970: 1_800_000_000)

func flag(_ key: String = "f", killed: Bool = false, archived: Bool = false,
          properties: [String: PropertyDefinition] = ["color": PropertyDefinition(type: .string, defaultValue: "blue")],
          rules: [Rule]) -> FlagDefinition {
    FlagDefinition(key: key, archived: archived, killed: killed, properties: properties, rules: rules)
}

func ctx(hwid: String = "h1", userId: String? = nil, device: DeviceRecord? = nil, now: Date = t0,
         partial: Bool = false) -> DeviceContext {
    DeviceContext(hwid: hwid, userId: userId ?? hwid, device: device, now: now, partial: partial)
}

func device(_ hwid: String = "h1", pushToken: String? = nil, events: [PostedEvent] = []) -> DeviceRecord {
    var d = DeviceRecord(hwid: hwid)
    d.pushToken = pushToken
    for e in events { d.record(e) }
    return d
}

/// The rule id the flag evaluates to for one condition set.
func ruleId(_ when: Conditions, _ c: DeviceContext) -> String? {
    flag(rules: [Rule(id: "r", enabled: true, when: when)]).evaluate(c)?.ruleId
}

@Suite struct ConditionTests {
    @Test func emptyConditionsMatchEveryDevice() {
        #expect(ruleId(Conditions(), ctx()) == "r")
        #expect(ruleId(Conditions(userIds: [], hwids: [], eventsPosted: []), ctx()) == "r")
    }

    @Test func userIds() {
        let when = Conditions(userIds: ["alice", "bob"])
        #expect(ruleId(when, ctx(userId: "alice")) == "r")
        #expect(ruleId(when, ctx(userId: "carol")) == "default")
    }

    @Test func hwids() {
        let when = Conditions(hwids: ["h2"])
        #expect(ruleId(when, ctx(hwid: "h2")) == "r")
        #expect(ruleId(when, ctx(hwid: "h1")) == "default")
    }

    @Test func everyListedConditionMustHold() {
        let when = Conditions(userIds: ["alice"], hwids: ["h2"])
        #expect(ruleId(when, ctx(hwid: "h2", userId: "alice")) == "r")
        #expect(ruleId(when, ctx(hwid: "h1", userId: "alice")) == "default")
        #expect(ruleId(when, ctx(hwid: "h2", userId: "bob")) == "default")
    }

    @Test func pushRegistered() {
        let registered = device(pushToken: "abc")
        let unregistered = device()
        #expect(ruleId(Conditions(pushRegistered: true), ctx(device: registered)) == "r")
        #expect(ruleId(Conditions(pushRegistered: true), ctx(device: unregistered)) == "default")
        #expect(ruleId(Conditions(pushRegistered: true), ctx(device: nil)) == "default")
        #expect(ruleId(Conditions(pushRegistered: false), ctx(device: unregistered)) == "r")
        #expect(ruleId(Conditions(pushRegistered: false), ctx(device: registered)) == "default")
    }

    @Test func eventsPostedNeedsEveryEvent() {
        let d = device(events: [PostedEvent(name: "PW_Purchase", time: t0), PostedEvent(name: "Login", time: t0)])
        #expect(ruleId(Conditions(eventsPosted: ["PW_Purchase"]), ctx(device: d)) == "r")
        #expect(ruleId(Conditions(eventsPosted: ["PW_Purchase", "Login"]), ctx(device: d)) == "r")
        #expect(ruleId(Conditions(eventsPosted: ["PW_Purchase", "Refund"]), ctx(device: d)) == "default")
        #expect(ruleId(Conditions(eventsPosted: ["PW_Purchase"]), ctx(device: nil)) == "default")
    }

    @Test func eventNamesOutliveTheEventCap() {
        var d = device(events: [PostedEvent(name: "Rare", time: t0)])
        for k in 0..<(DeviceRecord.maxEventsKept + 5) { d.record(PostedEvent(name: "E\(k % 3)", time: t0)) }
        #expect(d.events.count == DeviceRecord.maxEventsKept)
        #expect(ruleId(Conditions(eventsPosted: ["Rare"]), ctx(device: d)) == "r")
    }

    @Test func sawFeatureWithinDays() {
        func impression(_ key: String, daysAgo: Double) -> PostedEvent {
            PostedEvent(name: "PW_FeatureFlagImpression", time: t0.addingTimeInterval(-daysAgo * 86_400),
                        attributes: ["flag_key": .string(key), "rule_id": "r", "enabled": true])
        }
        let when = Conditions(sawFeature: .init(flag: "checkout", days: 30))
        #expect(ruleId(when, ctx(device: device(events: [impression("checkout", daysAgo: 29.9)]))) == "r")
        #expect(ruleId(when, ctx(device: device(events: [impression("checkout", daysAgo: 30)]))) == "r")
        #expect(ruleId(when, ctx(device: device(events: [impression("checkout", daysAgo: 30.1)]))) == "default")
        #expect(ruleId(when, ctx(device: device(events: [impression("other", daysAgo: 1)]))) == "default")
        // Another event name with the same attribute does not count.
        let other = PostedEvent(name: "Custom", time: t0, attributes: ["flag_key": "checkout"])
        #expect(ruleId(when, ctx(device: device(events: [other]))) == "default")
        // The latest impression counts, whatever the order they arrive in.
        let both = device(events: [impression("checkout", daysAgo: 1), impression("checkout", daysAgo: 40)])
        #expect(ruleId(when, ctx(device: both)) == "r")
        // Time moves on: the same device falls out of the window.
        #expect(ruleId(when, ctx(device: both, now: t0.addingTimeInterval(30 * 86_400))) == "default")
    }

    @Test func rolloutPercentUsesTheStableBucket() {
        for user in ["alice", "bob", "u-17", ""] {
            let bucket = RolloutBucket.bucket(flagKey: "f", userId: user)
            #expect((0..<100).contains(bucket))
            #expect(ruleId(Conditions(rolloutPercent: Double(bucket + 1)), ctx(userId: user)) == "r")
            #expect(ruleId(Conditions(rolloutPercent: Double(bucket)), ctx(userId: user)) == "default")
        }
        #expect(ruleId(Conditions(rolloutPercent: 0), ctx(userId: "alice")) == "default")
        #expect(ruleId(Conditions(rolloutPercent: 100), ctx(userId: "alice")) == "r")
    }
}

@Suite struct RolloutBucketTests {
    @Test func isStableAcrossRunsAndMachines() {
        // Fixed values: a change here re-buckets every user of every soak test.
        #expect(RolloutBucket.bucket(flagKey: "new_checkout", userId: "alice") == RolloutBucket.bucket(flagKey: "new_checkout", userId: "alice"))
        let pinned = ["alice", "bob", "carol", "user-1", "user-2"].map { RolloutBucket.bucket(flagKey: "new_checkout", userId: $0) }
        #expect(pinned == RolloutBucketTests.pinned)
    }

    static let pinned = [28, 75, 83, 13, 77]

    @Test func dependsOnTheFlagKey() {
        let users = (0..<1000).map { "user-\($0)" }
        let a = users.map { RolloutBucket.bucket(flagKey: "a", userId: $0) }
        let b = users.map { RolloutBucket.bucket(flagKey: "b", userId: $0) }
        let same = zip(a, b).filter { $0 == $1 }.count
        #expect(same < 40)  // about 10 expected by chance
    }

    @Test func spreadsEvenly() {
        let users = (0..<10_000).map { "user-\($0)" }
        let inHalf = users.filter { RolloutBucket.bucket(flagKey: "new_checkout", userId: $0) < 50 }.count
        #expect((4_500...5_500).contains(inHalf))
        var perBucket = [Int](repeating: 0, count: 100)
        for u in users { perBucket[RolloutBucket.bucket(flagKey: "new_checkout", userId: u)] += 1 }
        #expect(perBucket.min()! >= 60 && perBucket.max()! <= 140)  // 100 expected each
        let tenPercent = users.filter { RolloutBucket.bucket(flagKey: "other", userId: $0) < 10 }.count
        #expect((800...1_200).contains(tenPercent))
    }
}

@Suite struct FlagEvaluationTests {
    let properties: [String: PropertyDefinition] = [
        "color": PropertyDefinition(type: .string, defaultValue: "blue"),
        "max": PropertyDefinition(type: .number, defaultValue: 3),
        "layout": PropertyDefinition(type: .json, defaultValue: ["columns": 1]),
    ]

    @Test func firstMatchingRuleDecidesWithOverridesOnDefaults() {
        let f = flag(properties: properties, rules: [
            Rule(id: "r_off", enabled: false, when: Conditions(userIds: ["bob"])),
            Rule(id: "r_alice", enabled: true, when: Conditions(userIds: ["alice"]), properties: ["color": "green"]),
            Rule(id: "r_all", enabled: true, properties: ["max": 9]),
        ])
        #expect(f.evaluate(ctx(userId: "bob")) == EvaluatedFlag(key: "f", enabled: false, ruleId: "r_off",
                                                                properties: ["color": "blue", "max": 3, "layout": ["columns": 1]]))
        #expect(f.evaluate(ctx(userId: "alice")) == EvaluatedFlag(key: "f", enabled: true, ruleId: "r_alice",
                                                                  properties: ["color": "green", "max": 3, "layout": ["columns": 1]]))
        #expect(f.evaluate(ctx(userId: "carol")) == EvaluatedFlag(key: "f", enabled: true, ruleId: "r_all",
                                                                  properties: ["color": "blue", "max": 9, "layout": ["columns": 1]]))
    }

    @Test func noMatchGivesDefault() {
        let f = flag(properties: properties, rules: [Rule(id: "r", enabled: true, when: Conditions(userIds: ["x"]), properties: ["color": "red"])])
        #expect(f.evaluate(ctx()) == EvaluatedFlag(key: "f", enabled: false, ruleId: "default",
                                                   properties: ["color": "blue", "max": 3, "layout": ["columns": 1]]))
        #expect(flag(properties: [:], rules: []).evaluate(ctx()) == EvaluatedFlag(key: "f", enabled: false, ruleId: "default", properties: [:]))
    }

    @Test func killedGivesDisabledEmptyRuleIdAndDefaults() {
        let f = flag(killed: true, properties: properties, rules: [Rule(id: "r", enabled: true, properties: ["color": "red"])])
        #expect(f.evaluate(ctx()) == EvaluatedFlag(key: "f", enabled: false, ruleId: "",
                                                   properties: ["color": "blue", "max": 3, "layout": ["columns": 1]]))
    }

    @Test func archivedIsAbsentEvenWhenKilled() {
        #expect(flag(archived: true, rules: [Rule(id: "r", enabled: true)]).evaluate(ctx()) == nil)
        #expect(flag(killed: true, archived: true, rules: []).evaluate(ctx()) == nil)
        let app = Application(code: "A", flags: [flag("a", archived: true, rules: []), flag("b", rules: [])])
        #expect(app.featureFlagsResponse(ctx())["flags"]?.arrayValue?.map { $0["key"] } == [.string("b")])
    }

    @Test func planWithoutFeatureFlagsAnswersWithoutFlags() {
        let app = Application(code: "A", featureFlagsInPlan: false, flags: [flag(rules: [Rule(id: "r", enabled: true)])])
        #expect(app.featureFlagsResponse(ctx()) == .object(["partial": false]))
        let inPlan = Application(code: "A", flags: [flag(rules: [Rule(id: "r", enabled: true)])])
        #expect(inPlan.featureFlagsResponse(ctx()) == .object(["partial": false, "flags": [
            ["key": "f", "enabled": true, "rule_id": "r", "properties": ["color": "blue"]],
        ]]))
    }

    @Test func partialSkipsRulesThatNeedSegmentData() {
        let d = device(pushToken: "tok", events: [PostedEvent(name: "PW_Purchase", time: t0)])
        let f = flag(rules: [
            Rule(id: "r_push", enabled: true, when: Conditions(pushRegistered: true)),
            Rule(id: "r_events", enabled: true, when: Conditions(eventsPosted: ["PW_Purchase"])),
            Rule(id: "r_saw", enabled: true, when: Conditions(sawFeature: .init(flag: "f", days: 1))),
            Rule(id: "r_user", enabled: true, when: Conditions(userIds: ["alice"])),
        ])
        #expect(f.evaluate(ctx(userId: "alice", device: d))?.ruleId == "r_push")
        #expect(f.evaluate(ctx(userId: "alice", device: d, partial: true))?.ruleId == "r_user")
        #expect(f.evaluate(ctx(userId: "bob", device: d, partial: true))?.ruleId == "default")
        let app = Application(code: "A", flags: [f])
        #expect(app.featureFlagsResponse(ctx(userId: "alice", device: d, partial: true))["partial"] == true)
    }
}
