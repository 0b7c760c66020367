import AgentCore
import Foundation

/// The stable rollout bucket (0–99) of a User ID for a flag: the same on
/// every run and every machine (never Swift's randomized `hashValue`).
///
/// bucket = fmix64(FNV-1a-64(UTF-8 of flagKey ‖ 0x00 ‖ userId)) mod 100.
/// FNV-1a alone leaves the low bits of near-identical IDs ("user1", "user2")
/// correlated; MurmurHash3's 64-bit finalizer mixes the high bits down.
public enum RolloutBucket {
    public static func bucket(flagKey: String, userId: String) -> Int {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        @inline(__always) func add(_ b: UInt8) {
            h ^= UInt64(b)
            h &*= 0x0000_0100_0000_01B3
        }
        for b in flagKey.utf8 { add(b) }
        add(0)
        for b in userId.utf8 { add(b) }
        h ^= h >> 33
        h &*= 0xff51_afd7_ed55_8ccd
        h ^= h >> 33
        h &*= 0xc4ce_b9fe_1a85_ec53
        h ^= h >> 33
        return Int(h % 100)
    }
}

/// The device and user a `getFeatureFlags` is evaluated for.
public struct DeviceContext: Sendable {
    public var hwid: String
    /// The request's `userId` (the HWID until a User ID is set).
    public var userId: String
    public var device: DeviceRecord?
    public var now: Date
    /// Skip rules that need segment data (`partial` fault, ST-5).
    public var partial: Bool

    public init(hwid: String, userId: String, device: DeviceRecord?, now: Date, partial: Bool = false) {
        self.hwid = hwid
        self.userId = userId
        self.device = device
        self.now = now
        self.partial = partial
    }
}

/// One flag as `getFeatureFlags` returns it (docs/device-api.md A.3).
public struct EvaluatedFlag: Sendable, Equatable {
    public var key: String
    public var enabled: Bool
    /// The matching rule's id; `"default"` when none matched; `""` when killed.
    public var ruleId: String
    public var properties: [String: JSONValue]

    public init(key: String, enabled: Bool, ruleId: String, properties: [String: JSONValue]) {
        self.key = key
        self.enabled = enabled
        self.ruleId = ruleId
        self.properties = properties
    }

    public var json: JSONValue {
        .object(["key": .string(key), "enabled": .bool(enabled), "rule_id": .string(ruleId),
                 "properties": .object(properties)])
    }
}

extension Conditions {
    /// Whether every condition that is set holds for the context.
    public func matches(flagKey: String, _ ctx: DeviceContext) -> Bool {
        if let userIds, !userIds.isEmpty, !userIds.contains(ctx.userId) { return false }
        if let hwids, !hwids.isEmpty, !hwids.contains(ctx.hwid) { return false }
        if let pushRegistered, (ctx.device?.pushToken != nil) != pushRegistered { return false }
        if let eventsPosted {
            let posted = ctx.device?.eventNames ?? []
            if !eventsPosted.allSatisfy(posted.contains) { return false }
        }
        if let rolloutPercent,
           !(Double(RolloutBucket.bucket(flagKey: flagKey, userId: ctx.userId)) < rolloutPercent) { return false }
        if let sawFeature {
            guard let seen = ctx.device?.lastImpression[sawFeature.flag],
                  ctx.now.timeIntervalSince(seen) <= sawFeature.days * 86_400
            else { return false }
        }
        return true
    }
}

extension FlagDefinition {
    /// The flag for this device and user, or nil when archived (absent).
    public func evaluate(_ ctx: DeviceContext) -> EvaluatedFlag? {
        if archived { return nil }
        if killed { return EvaluatedFlag(key: key, enabled: false, ruleId: "", properties: defaultProperties) }
        for rule in rules {
            if ctx.partial, rule.when.needsSegmentData { continue }
            if rule.when.matches(flagKey: key, ctx) {
                let props = defaultProperties.merging(rule.properties) { _, override in override }
                return EvaluatedFlag(key: key, enabled: rule.enabled, ruleId: rule.id, properties: props)
            }
        }
        return EvaluatedFlag(key: key, enabled: false, ruleId: "default", properties: defaultProperties)
    }
}

extension Application {
    /// The `response` object of `getFeatureFlags` for this device and user.
    public func featureFlagsResponse(_ ctx: DeviceContext) -> JSONValue {
        var response: [String: JSONValue] = ["partial": .bool(ctx.partial)]
        if featureFlagsInPlan {
            response["flags"] = .array(flags.compactMap { $0.evaluate(ctx)?.json })
        }
        return .object(response)
    }
}
