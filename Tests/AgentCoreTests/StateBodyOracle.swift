@testable import AgentCore
import Foundation

// The decoder the state file had before `PersistentState(stateBody:)`: `JSONReader.parse` into a
// tree, then the tree's members looked up. Kept here only as the reference the new decoder is
// held to (StateBodyTests): the product has one definition of the stored shape, this is its
// former spelling, unchanged.

extension PersistentState {
    /// The former path: the whole body parsed into a `JSONValue`, then judged.
    static func viaTree(_ body: [UInt8]) throws -> PersistentState {
        try PersistentState(treeOracle: JSONReader.parse(body))
    }

    init(treeOracle json: JSONValue) throws(StateFormatError) {
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
