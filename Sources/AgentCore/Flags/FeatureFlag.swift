import FoundationEssentials

/// One flag as the server evaluated it for this device and user (FF-1, FF-4).
public struct FeatureFlag: Sendable, Equatable, Codable {
    public var key: String
    public var isEnabled: Bool
    /// The rule that decided the result; `default` when none matched; empty when killed (FF-4, FF-8).
    public var ruleId: String
    /// Property values; when the flag is off they hold the Control Panel defaults (FF-5).
    public var properties: [String: JSONValue]

    public init(key: String, isEnabled: Bool, ruleId: String, properties: [String: JSONValue] = [:]) {
        self.key = key
        self.isEnabled = isEnabled
        self.ruleId = ruleId
        self.properties = properties
    }

    /// OpenFeature's reason for this flag's value (docs/socket-api.md B.1 provenance).
    public var reason: EvaluationReason {
        switch ruleId {
        case "": .disabled
        case "default": .default
        default: .targetingMatch
        }
    }
}

/// The typed property reads of FF-5.
public enum PropertyType: String, Sendable, CaseIterable {
    case string, number, bool, jsonObject, jsonArray

    /// The one vocabulary a user types (agentctl `property --type`, the socket's `type`, the
    /// Python client): `string`, `number`, `bool`, `jsonObject`, `jsonArray`; `json` and
    /// `json-object` are accepted for `jsonObject`, `json-array` for `jsonArray`.
    public init?(spelling: String) {
        if let exact = PropertyType(rawValue: spelling) {
            self = exact
            return
        }
        switch spelling {
        case "json", "json-object": self = .jsonObject
        case "json-array": self = .jsonArray
        default: return nil
        }
    }

    /// How an error names the accepted spellings.
    public static let spellings = "string, number, bool, jsonObject (or json, json-object), jsonArray (or json-array)"

    public var isScalar: Bool {
        switch self {
        case .string, .number, .bool: true
        case .jsonObject, .jsonArray: false
        }
    }

    /// Whether `value` holds this type. A Boolean is never a Number, nor a Number a Boolean (FF-5).
    public func matches(_ value: JSONValue) -> Bool {
        switch (self, value) {
        case (.string, .string), (.number, .number), (.bool, .bool), (.jsonObject, .object), (.jsonArray, .array):
            true
        default:
            false
        }
    }
}

/// OpenFeature's evaluation reasons, as docs/socket-api.md B.1 names them.
public enum EvaluationReason: String, Sendable {
    case targetingMatch = "TARGETING_MATCH"
    case `default` = "DEFAULT"
    case disabled = "DISABLED"
    case error = "ERROR"
}

/// OpenFeature's error codes, given with `EvaluationReason.error` only.
public enum EvaluationErrorCode: String, Sendable {
    /// Flags are loaded but the key is absent (FF-2).
    case flagNotFound = "FLAG_NOT_FOUND"
    /// No valid flags: none fetched yet, expired (ST-3) or discarded (ST-2).
    case providerNotReady = "PROVIDER_NOT_READY"
    /// `property` of another type, or a property the flag does not carry.
    case typeMismatch = "TYPE_MISMATCH"
}

/// Where the flags being served came from.
public enum FlagSource: String, Sendable, Codable {
    case network, cache, none
}

/// How a read was answered: docs/socket-api.md B.1's provenance fields.
public struct Provenance: Sendable, Equatable {
    public var reason: EvaluationReason
    public var errorCode: EvaluationErrorCode?
    public var source: FlagSource
    public var ageSeconds: Seconds?

    public init(reason: EvaluationReason, errorCode: EvaluationErrorCode? = nil, source: FlagSource, ageSeconds: Seconds?) {
        self.reason = reason
        self.errorCode = errorCode
        self.source = source
        self.ageSeconds = ageSeconds
    }
}

/// A read's value with its provenance.
public struct Evaluation<Value: Sendable>: Sendable {
    public var value: Value
    public var provenance: Provenance
}

extension Evaluation: Equatable where Value: Equatable {}
