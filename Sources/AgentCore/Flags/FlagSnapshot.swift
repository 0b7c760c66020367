import FoundationEssentials

/// A complete (or, in memory only, partial) flags response, bound to the application
/// code and User ID it was requested for (ST-1, ST-2, ST-5).
public struct FlagSnapshot: Sendable, Equatable, Codable {
    /// Flags by key. Keys are case-sensitive (FF-2).
    public var flags: [String: FeatureFlag]
    /// Wall-clock time of receipt: the 24-hour lifetime is measured from it (ST-1).
    public var receivedAt: Date
    public var applicationCode: String
    public var userId: String
    /// The server could not match segments in time (ST-5): never written to disk.
    public var partial: Bool

    public init(flags: [String: FeatureFlag], receivedAt: Date, applicationCode: String, userId: String, partial: Bool = false) {
        self.flags = flags
        self.receivedAt = receivedAt
        self.applicationCode = applicationCode
        self.userId = userId
        self.partial = partial
    }

    /// Whether the snapshot belongs to this application and user (ST-2).
    public func belongs(toApplication code: String, user: String) -> Bool {
        applicationCode == code && userId == user
    }

    /// Keys whose flag differs between two sets of served flags (LS-1): added, removed or
    /// changed in state, rule or any property value. Sorted.
    public static func changedKeys(from old: [String: FeatureFlag], to new: [String: FeatureFlag]) -> [String] {
        var keys: [String] = []
        for (key, flag) in new where old[key] != flag { keys.append(key) }
        for key in old.keys where new[key] == nil { keys.append(key) }
        return keys.sorted()
    }
}
