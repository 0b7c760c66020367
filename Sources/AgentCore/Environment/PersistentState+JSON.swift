import FoundationEssentials

// The stored form of `PersistentState`, written with `JSONWriter` and read with `JSONCursor`
// (JSONDecoder cost half of the start-up time with 1,000 stored flags; a `JSONValue` tree of
// the body most of what was left: docs/performance.md). Times are Unix seconds. The shape is
// the one `Codable` gives these types, so either can read the other.

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
}

extension PersistentState {
    /// The state in a state file's body: `JSONParseError` for a body that is not JSON,
    /// `StateFormatError` for JSON of another shape. Read as `JSONReader.parse` would read it,
    /// without its tree (docs/performance.md), and judged once read whole: bad JSON anywhere
    /// wins over a wrong field, a key that comes twice counts with its last value, `null` is
    /// absent, unknown keys are ignored.
    public init(stateBody bytes: UnsafeRawBufferPointer) throws {
        try self.init(stored: JSONCursor.read(bytes) { (c) throws(JSONParseError) in try StoredState(&c) })
    }

    public init(stateBody bytes: [UInt8]) throws {
        try self.init(stored: JSONCursor.read(bytes) { (c) throws(JSONParseError) in try StoredState(&c) })
    }

    /// The stored shape's rules, in the order they are checked (the first broken one is reported).
    private init(stored s: StoredState) throws(StateFormatError) {
        func fail(_ what: String) -> StateFormatError { StateFormatError(description: "state: \(what)") }
        func date(_ seconds: Double) -> Date { Date(timeIntervalSince1970: seconds) }

        guard s.isObject else { throw fail("not an object") }
        guard let hwid = s.hwid else { throw fail("hwid is not a string") }
        self.init(hwid: hwid)
        userId = try s.userId.value(or: fail("userId is not a string"))
        if let p = s.push {
            guard let types = p.notificationTypes.flatMap({ Int(exactly: $0) }) else {
                throw fail("push.notificationTypes is not an integer")
            }
            guard let token = p.token else { throw fail("push.token is not a string") }
            push = PushRegistration(token: token, notificationTypes: types,
                                    registeredAt: try p.registeredAt.value(or: fail("push.registeredAt is not a time")).map(date))
        }
        if let name = try s.notificationAuthorization.value(or: fail("notificationAuthorization is not a string")) {
            guard let status = NotificationAuthorization(rawValue: name) else { throw fail("unknown notificationAuthorization") }
            notificationAuthorization = status
        }
        if let u = s.registeredUser {
            guard let userId = u.userId else { throw fail("registeredUser.userId is not a string") }
            guard let at = u.at else { throw fail("registeredUser.at is not a time") }
            registeredUser = RegisteredUser(userId: userId, at: date(at))
        }
        if let f = s.flags {
            guard let list = f.flags else { throw fail("flags.flags is not an object") }
            let (flags, incomplete) = list.resolved()
            if let key = incomplete { throw fail("flag \(key) is incomplete") }
            guard let receivedAt = f.receivedAt else { throw fail("flags.receivedAt is not a time") }
            guard let applicationCode = f.applicationCode else { throw fail("flags.applicationCode is not a string") }
            guard let userId = f.userId else { throw fail("flags.userId is not a string") }
            self.flags = FlagSnapshot(flags: flags, receivedAt: date(receivedAt), applicationCode: applicationCode,
                                      userId: userId, partial: f.partial ?? false)
        }
        primerLastShownAt = try s.primerLastShownAt.value(or: fail("primerLastShownAt is not a time")).map(date)
        baseURL = try s.baseURL.value(or: fail("baseURL is not a string"))
        if let seconds = try s.clockOffset.value(or: fail("clockOffset: expected seconds ≥ 0")) {
            guard seconds.isFinite, seconds >= 0 else { throw fail("clockOffset: expected seconds ≥ 0") }
            clockOffset = seconds
        }
    }
}

// MARK: - The body as read, before its rules are applied

/// An optional member as read: in the stored shape, `null` is the member's absence. A
/// required member is kept as `Value?` instead: there absent, `null` and another kind are
/// all the same fault.
private enum Field<Value> {
    case absent
    case value(Value)
    /// A value of another kind.
    case wrong

    func value(or error: @autoclosure () -> StateFormatError) throws(StateFormatError) -> Value? {
        switch self {
        case .absent: return nil
        case .value(let v): return v
        case .wrong: throw error()
        }
    }
}

extension JSONCursor {
    fileprivate mutating func stringField() throws(JSONParseError) -> Field<String> {
        if let s = try readString() { return .value(s) }
        return try readNull() ? .absent : .wrong
    }

    fileprivate mutating func numberField() throws(JSONParseError) -> Field<Double> {
        if let n = try readNumber() { return .value(n) }
        return try readNull() ? .absent : .wrong
    }

    /// An object member read by `read` when it is an object; nil for `null`; `empty` for
    /// another kind (whose members are all missing: the rules report the first one).
    fileprivate mutating func nested<T>(
        empty: T, _ read: (inout JSONCursor, inout T) throws(JSONParseError) -> Void
    ) throws(JSONParseError) -> T? {
        if peek() == .object {
            var value = empty
            try read(&self, &value)
            return value
        }
        return try readNull() ? nil : empty
    }
}

/// The top-level object's members.
private struct StoredState {
    var isObject = false
    var hwid: String?
    var userId = Field<String>.absent
    var push: StoredPush?
    var notificationAuthorization = Field<String>.absent
    var registeredUser: StoredUser?
    var flags: StoredFlags?
    var primerLastShownAt = Field<Double>.absent
    var baseURL = Field<String>.absent
    var clockOffset = Field<Double>.absent

    private init() {}

    init(_ c: inout JSONCursor) throws(JSONParseError) {
        var s = StoredState()
        let isObject = try c.readObject { (c, key) throws(JSONParseError) in
            switch key {
            case "flags": s.flags = try c.nested(empty: StoredFlags(), StoredFlags.read)
            case "hwid": s.hwid = try c.readString()
            case "userId": s.userId = try c.stringField()
            case "push": s.push = try c.nested(empty: StoredPush(), StoredPush.read)
            case "notificationAuthorization": s.notificationAuthorization = try c.stringField()
            case "registeredUser": s.registeredUser = try c.nested(empty: StoredUser(), StoredUser.read)
            case "primerLastShownAt": s.primerLastShownAt = try c.numberField()
            case "baseURL": s.baseURL = try c.stringField()
            case "clockOffset": s.clockOffset = try c.numberField()
            default: break
            }
        }
        if !isObject { try c.skipValue() }  // refused once the body is known to be JSON
        s.isObject = isObject
        self = s
    }
}

private struct StoredPush {
    var notificationTypes: Double?
    var token: String?
    var registeredAt = Field<Double>.absent

    static func read(_ c: inout JSONCursor, into p: inout StoredPush) throws(JSONParseError) {
        _ = try c.readObject { (c, key) throws(JSONParseError) in
            switch key {
            case "token": p.token = try c.readString()
            case "notificationTypes": p.notificationTypes = try c.readNumber()
            case "registeredAt": p.registeredAt = try c.numberField()
            default: break
            }
        }
    }
}

private struct StoredUser {
    var userId: String?
    var at: Double?

    static func read(_ c: inout JSONCursor, into u: inout StoredUser) throws(JSONParseError) {
        _ = try c.readObject { (c, key) throws(JSONParseError) in
            switch key {
            case "userId": u.userId = try c.readString()
            case "at": u.at = try c.readNumber()
            default: break
            }
        }
    }
}

private struct StoredFlags {
    /// nil when `flags.flags` is not an object.
    var flags: StoredFlagList?
    var receivedAt: Double?
    var applicationCode: String?
    var userId: String?
    var partial: Bool?

    static func read(_ c: inout JSONCursor, into f: inout StoredFlags) throws(JSONParseError) {
        _ = try c.readObject { (c, key) throws(JSONParseError) in
            switch key {
            case "flags": f.flags = try StoredFlagList(&c)
            case "receivedAt": f.receivedAt = try c.readNumber()
            case "applicationCode": f.applicationCode = try c.readString()
            case "userId": f.userId = try c.readString()
            case "partial": f.partial = try c.readBool()
            default: break
            }
        }
    }
}

/// `flags.flags` as read: one member per flag, named by its key (a flag's own `key` member is
/// not read). The complete flags in order, and where incomplete ones came between them.
private struct StoredFlagList {
    var complete: [FeatureFlag] = []
    /// Each incomplete flag's key, after how many complete ones it came.
    var incomplete: [(position: Int, key: String)] = []

    private init() {}

    /// nil when the value is not an object.
    init?(_ c: inout JSONCursor) throws(JSONParseError) {
        var list = StoredFlagList()
        let isObject = try c.readObject { (c, key) throws(JSONParseError) in
            var isEnabled: Bool?, ruleId: String?, properties: [String: JSONValue]?
            _ = try c.readObject { (c, member) throws(JSONParseError) in
                switch member {
                case "isEnabled": isEnabled = try c.readBool()
                case "ruleId": ruleId = try c.readString()
                case "properties": properties = c.peek() == .object ? try c.readValue().objectValue : nil
                default: break
                }
            }
            let name = key.string
            if let isEnabled, let ruleId, let properties {
                list.complete.append(FeatureFlag(key: name, isEnabled: isEnabled, ruleId: ruleId, properties: properties))
            } else {
                list.incomplete.append((list.complete.count, name))
            }
        }
        guard isObject else { return nil }
        self = list
    }

    /// The flags by key, a key that comes twice counting with its last flag; and the first
    /// incomplete flag no later one replaces.
    func resolved() -> (flags: [String: FeatureFlag], incomplete: String?) {
        var flags = [String: FeatureFlag](minimumCapacity: complete.count)
        guard !incomplete.isEmpty else {
            for flag in complete { flags[flag.key] = flag }
            return (flags, nil)
        }
        var missing: [String] = []  // keys whose last flag so far is incomplete
        var next = 0
        func dropIncomplete(before position: Int) {
            while next < incomplete.count, incomplete[next].position <= position {
                let key = incomplete[next].key
                flags[key] = nil
                if !missing.contains(key) { missing.append(key) }
                next += 1
            }
        }
        for (index, flag) in complete.enumerated() {
            dropIncomplete(before: index)
            flags[flag.key] = flag
            missing.removeAll { $0 == flag.key }
        }
        dropIncomplete(before: Int.max)
        return (flags, missing.first)
    }
}
