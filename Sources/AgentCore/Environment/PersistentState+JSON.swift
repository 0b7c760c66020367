import FoundationEssentials

// The stored form of `PersistentState`, read and written with `JSONReader`/`JSONWriter`
// (JSONDecoder cost half of the start-up time with 1,000 stored flags). Times are Unix
// seconds. The shape is the one `Codable` gives these types, so either can read the other.

/// A stored state that does not have the expected shape.
public struct StateFormatError: Error, Sendable, CustomStringConvertible {
    public var description: String
}

extension PersistentState {
    public var json: JSONValue {
        var o: [String: JSONValue] = ["hwid": .string(hwid)]
        if let userId { o["userId"] = .string(userId) }
        if let push {
            var p: [String: JSONValue] = ["token": .string(push.token), "notificationTypes": .number(Double(push.notificationTypes))]
            if let at = push.registeredAt { p["registeredAt"] = .number(at.timeIntervalSince1970) }
            o["push"] = .object(p)
        }
        if let notificationAuthorization { o["notificationAuthorization"] = .string(notificationAuthorization.rawValue) }
        if let registeredUser {
            o["registeredUser"] = ["userId": .string(registeredUser.userId), "at": .number(registeredUser.at.timeIntervalSince1970)]
        }
        if let flags {
            o["flags"] = [
                "flags": .object(flags.flags.mapValues { f in
                    ["key": .string(f.key), "isEnabled": .bool(f.isEnabled), "ruleId": .string(f.ruleId), "properties": .object(f.properties)]
                }),
                "receivedAt": .number(flags.receivedAt.timeIntervalSince1970),
                "applicationCode": .string(flags.applicationCode), "userId": .string(flags.userId), "partial": .bool(flags.partial),
            ]
        }
        if let primerLastShownAt { o["primerLastShownAt"] = .number(primerLastShownAt.timeIntervalSince1970) }
        if let baseURL { o["baseURL"] = .string(baseURL) }
        if let clockOffset { o["clockOffset"] = .number(clockOffset) }
        return .object(o)
    }

    public init(json: JSONValue) throws(StateFormatError) {
        func fail(_ what: String) -> StateFormatError { StateFormatError(description: "state: \(what)") }
        func string(_ v: JSONValue?, _ name: String) throws(StateFormatError) -> String {
            guard let s = v?.stringValue else { throw fail("\(name) is not a string") }
            return s
        }
        func date(_ v: JSONValue?, _ name: String) throws(StateFormatError) -> Date {
            guard let n = v?.numberValue else { throw fail("\(name) is not a time") }
            return Date(timeIntervalSince1970: n)
        }
        // `null` is absent. (Not `v.flatMap { $0.isNull ? nil : $0 }`: there `nil` is JSONValue's
        // own nil literal, `.null`, and a null field was refused as the wrong type.)
        func optional(_ v: JSONValue?) -> JSONValue? {
            guard let v, !v.isNull else { return nil }
            return v
        }

        guard json.objectValue != nil else { throw fail("not an object") }
        self.init(hwid: try string(json["hwid"], "hwid"))
        if let v = optional(json["userId"]) { userId = try string(v, "userId") }
        if let p = optional(json["push"]) {
            guard let types = p["notificationTypes"]?.numberValue.flatMap({ Int(exactly: $0) }) else {
                throw fail("push.notificationTypes is not an integer")
            }
            push = PushRegistration(token: try string(p["token"], "push.token"), notificationTypes: types,
                                    registeredAt: try optional(p["registeredAt"]).map { v throws(StateFormatError) in try date(v, "push.registeredAt") })
        }
        if let v = optional(json["notificationAuthorization"]) {
            guard let status = NotificationAuthorization(rawValue: try string(v, "notificationAuthorization")) else {
                throw fail("unknown notificationAuthorization")
            }
            notificationAuthorization = status
        }
        if let u = optional(json["registeredUser"]) {
            registeredUser = RegisteredUser(userId: try string(u["userId"], "registeredUser.userId"), at: try date(u["at"], "registeredUser.at"))
        }
        if let f = optional(json["flags"]) {
            guard let members = f["flags"]?.objectValue else { throw fail("flags.flags is not an object") }
            var flags: [String: FeatureFlag] = [:]
            flags.reserveCapacity(members.count)
            for (key, value) in members {
                guard let enabled = value["isEnabled"]?.boolValue, let ruleId = value["ruleId"]?.stringValue,
                      let properties = value["properties"]?.objectValue
                else { throw fail("flag \(key) is incomplete") }
                flags[key] = FeatureFlag(key: key, isEnabled: enabled, ruleId: ruleId, properties: properties)
            }
            self.flags = FlagSnapshot(flags: flags, receivedAt: try date(f["receivedAt"], "flags.receivedAt"),
                                      applicationCode: try string(f["applicationCode"], "flags.applicationCode"),
                                      userId: try string(f["userId"], "flags.userId"), partial: f["partial"]?.boolValue ?? false)
        }
        if let v = optional(json["primerLastShownAt"]) { primerLastShownAt = try date(v, "primerLastShownAt") }
        if let v = optional(json["baseURL"]) { baseURL = try string(v, "baseURL") }
        if let v = optional(json["clockOffset"]) {
            guard let seconds = v.numberValue, seconds.isFinite, seconds >= 0 else { throw fail("clockOffset: expected seconds ≥ 0") }
            clockOffset = seconds
        }
    }
}
