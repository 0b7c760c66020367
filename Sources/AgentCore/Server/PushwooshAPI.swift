import FoundationEssentials

/// The Pushwoosh device API, `json/1.3` (docs/device-api.md A): request bodies, the envelope and
/// the success rule, error classification (RF-7) and the `getFeatureFlags` response
/// (A.3, assumed — kept in this one file so it can follow the real server).
public enum PushwooshAPI {
    /// The SDK version the agent reports (`v`).
    public static let sdkVersion = "7.2.10"
    /// iOS.
    public static let deviceType = 1
    /// RF-8: flags are requested only when the base URL ends with this.
    public static let flagsPathSuffix = "json/1.3/"

    public enum Method: String, Sendable, CaseIterable {
        case applicationOpen, registerDevice, unregisterDevice, registerUser, postEvent, getFeatureFlags
    }

    /// The default base URL for an application code (A.1).
    public static func defaultBaseURL(applicationCode: String) -> String {
        "https://\(applicationCode).api.pushwoosh.com/json/1.3/"
    }

    /// Normalises a configured server URL (A.1): trims whitespace, requires `http://` or
    /// `https://` with a host, adds a trailing `/`. Nil when it is not usable.
    public static func normalizedServerURL(_ raw: String) -> String? {
        let trimmed = raw.trimmingWhitespace()
        guard let url = URL(string: trimmed), let scheme = url.scheme?.lowercased(),
              scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty
        else { return nil }
        return trimmed.hasSuffix("/") ? trimmed : trimmed + "/"
    }

    /// RF-8: whether flags may be requested from this base URL.
    public static func supportsFeatureFlags(baseURL: String) -> Bool {
        baseURL.hasSuffix(flagsPathSuffix)
    }

    /// The fields every request body carries (A.1).
    public struct CommonFields: Sendable, Equatable {
        public var applicationCode: String
        public var hwid: String
        public var userId: String

        public init(applicationCode: String, hwid: String, userId: String) {
            self.applicationCode = applicationCode
            self.hwid = hwid
            self.userId = userId
        }
    }

    /// Builds the HTTP request for `method` (A.1): `POST base+method`, JSON body
    /// `{"request": {common fields…, fields…}}`, `Authorization: Token …` when a token is
    /// configured, `X-Retry-Count` on retries.
    public static func request(
        _ method: Method, baseURL: String, common: CommonFields, fields: [String: JSONValue] = [:],
        apiToken: String?, retryCount: Int = 0, timeout: Seconds
    ) -> HTTPRequest {
        var body = fields
        body["application"] = .string(common.applicationCode)
        body["hwid"] = .string(common.hwid)
        body["userId"] = .string(common.userId)
        body["v"] = .string(sdkVersion)
        body["device_type"] = .number(Double(deviceType))
        var headers = [HTTPHeader("Content-Type", "application/json; charset=utf-8")]
        if let token = apiToken, !token.isEmpty { headers.append(HTTPHeader("Authorization", "Token \(token)")) }
        if retryCount > 0 { headers.append(HTTPHeader("X-Retry-Count", String(retryCount))) }
        return HTTPRequest(url: baseURL + method.rawValue, headers: headers,
                           body: encode(["request": .object(body)]), timeout: timeout, method: method)
    }

    static func encode(_ value: JSONValue) -> Data {
        Data(JSONWriter.encode(value))
    }

    /// A failed call, classified as the SDK does (RF-7, A.1).
    public struct Failure: Error, Sendable, Equatable {
        /// The HTTP status; 0 when no HTTP response arrived; 200 when the server answered
        /// HTTP 200 but the answer could not be used.
        public var code: Int
        public var message: String
        /// A.1: HTTP 408, 429, 500, 502, 503, 504 and network failures.
        public var retryable: Bool
        /// `Retry-After` seconds on 429 or 503 (RF-10).
        public var retryAfter: Seconds?

        public init(code: Int, message: String, retryable: Bool, retryAfter: Seconds? = nil) {
            self.code = code
            self.message = message
            self.retryable = retryable
            self.retryAfter = retryAfter
        }

        /// RF-11: the credentials or the application code are wrong.
        public var isFatal: Bool { code == 401 || code == 403 }
    }

    /// A successful call: the envelope's `response` and an optional `base_url`.
    public struct Success: Sendable, Equatable {
        public var response: JSONValue
        public var baseURL: String?
    }

    static let retryableStatuses: Set<Int> = [408, 429, 500, 502, 503, 504]

    /// Applies the success rule (A.1): HTTP 200 **and** `status_code` 200.
    public static func classify(_ outcome: HTTPOutcome) -> Result<Success, Failure> {
        switch outcome {
        case .noResponse(let reason):
            return .failure(Failure(code: 0, message: "no response: \(reason)", retryable: true))
        case .response(let status, let headers, let body):
            guard status == 200 else {
                var retryAfter: Seconds?
                if status == 429 || status == 503, let raw = headers["retry-after"] {
                    retryAfter = parseRetryAfter(raw)
                }
                return .failure(Failure(code: status, message: "HTTP \(status)",
                                        retryable: retryableStatuses.contains(status), retryAfter: retryAfter))
            }
            let envelope: JSONValue
            do {
                envelope = try body.withUnsafeBytes { try JSONReader.parse($0) }
            } catch {
                return .failure(Failure(code: 200, message: "answer is not JSON: \(error) (\(body.count) bytes)", retryable: false))
            }
            guard envelope.objectValue != nil else {
                return .failure(Failure(code: 200, message: "answer is JSON but not an object: found \(Self.found(envelope))", retryable: false))
            }
            guard let rawStatusCode = envelope["status_code"], !rawStatusCode.isNull else {
                return .failure(Failure(code: 200, message: "status_code is missing", retryable: false))
            }
            guard let statusCode = rawStatusCode.numberValue else {
                return .failure(Failure(code: 200, message: "status_code is not a number: found \(Self.found(rawStatusCode))", retryable: false))
            }
            guard statusCode == 200 else {
                let message = envelope["status_message"]?.stringValue ?? ""
                // Any number may arrive here (1e20 included): print it without converting to Int.
                let code = Int(exactly: statusCode).map(String.init) ?? String(statusCode)
                return .failure(Failure(code: 200, message: "status_code \(code): \(message)", retryable: false))
            }
            let response = envelope["response"] ?? .null
            var baseURL: String?
            if let raw = response["base_url"]?.stringValue ?? envelope["base_url"]?.stringValue {
                baseURL = normalizedServerURL(raw)
            }
            return .success(Success(response: response, baseURL: baseURL))
        }
    }

    /// The longest `Retry-After` honoured: a day (a server asking for more is treated as asking for a day).
    public static let maximumRetryAfter: Seconds = 86_400

    /// `Retry-After` as delta-seconds (HTTP dates are not expected from this API), at most a day.
    static func parseRetryAfter(_ raw: String) -> Seconds? {
        guard let n = Double(raw.trimmingWhitespace()), n >= 0, n.isFinite else { return nil }
        return min(n, maximumRetryAfter)
    }

    /// The `getFeatureFlags` response (A.3).
    public struct FlagsResponse: Sendable, Equatable {
        public var flags: [String: FeatureFlag]
        public var partial: Bool
    }

    /// Parses A.3's `response`. Unusable answers are failures with code 200 (RF-7).
    /// Duplicate keys: the last one wins.
    public static func parseFlags(_ response: JSONValue) -> Result<FlagsResponse, Failure> {
        // Every message names the JSON path of what is wrong, and what was found there.
        func unusable(_ why: String) -> Result<FlagsResponse, Failure> {
            .failure(Failure(code: 200, message: "unusable flags response: \(why)", retryable: false))
        }
        func wrong(_ path: String, _ expected: String, _ value: JSONValue) -> Result<FlagsResponse, Failure> {
            unusable("\(path) is not \(expected): found \(found(value))")
        }
        if response.isNull { return unusable("response is missing (absent or null)") }
        guard let object = response.objectValue else { return wrong("response", "an object", response) }
        var partial = false
        if let p = object["partial"] {
            switch p {
            case .bool(let b): partial = b
            case .null: partial = false
            default: return wrong("response.partial", "a boolean", p)
            }
        }
        guard let rawFlags = object["flags"], !rawFlags.isNull else {
            // FF-7: a plan without feature flags: a valid, complete, empty set.
            return .success(FlagsResponse(flags: [:], partial: partial))
        }
        guard let list = rawFlags.arrayValue else { return wrong("response.flags", "an array", rawFlags) }
        var flags: [String: FeatureFlag] = [:]
        for (index, item) in list.enumerated() {
            let path = "response.flags[\(index)]"
            guard item.objectValue != nil else { return wrong(path, "an object", item) }
            guard let rawKey = item["key"], !rawKey.isNull else { return unusable("\(path).key is missing") }
            guard let key = rawKey.stringValue else { return wrong(path + ".key", "a string", rawKey) }
            guard let rawEnabled = item["enabled"], !rawEnabled.isNull else { return unusable("\(path).enabled is missing (flag \(key))") }
            guard let enabled = rawEnabled.boolValue else { return wrong(path + ".enabled", "a boolean", rawEnabled) }
            let ruleId = item["rule_id"]?.stringValue ?? ""
            let properties = item["properties"]?.objectValue ?? [:]
            flags[key] = FeatureFlag(key: key, isEnabled: enabled, ruleId: ruleId, properties: properties)
        }
        return .success(FlagsResponse(flags: flags, partial: partial))
    }

    /// What a bad answer held where something else was expected: its kind, and a short
    /// excerpt of a scalar (`a string "200"`, `a number 1`, `an array`).
    static func found(_ value: JSONValue) -> String {
        switch value {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .number: return "a number " + String(JSONWriter.string(value).prefix(24))
        case .string(let text):
            let excerpt = text.count > 24 ? String(text.prefix(24)) + "…" : text
            return "a string " + JSONWriter.string(.string(excerpt))
        case .array(let items): return "an array of \(items.count)"
        case .object: return "an object"
        }
    }
}

// MARK: - The answer against the contract (`pushwoosh-agentd --doctor`)

extension PushwooshAPI {
    /// Where an answer departs from the contract (A.1, A.3): a JSON path (`response.flags`,
    /// `response.flags[2].enabled`) and what was found there. `fatal`: the agent cannot use the
    /// answer (RF-7); otherwise it uses it as described (a missing `rule_id` is served as "").
    public struct Deviation: Sendable, Equatable {
        public var path: String
        public var problem: String
        public var fatal: Bool

        public init(_ path: String, _ problem: String, fatal: Bool) {
            self.path = path
            self.problem = problem
            self.fatal = fatal
        }
    }

    /// Every deviation of a `getFeatureFlags` answer (HTTP status and body) from A.1 and A.3,
    /// in document order; empty when it is exactly what the agent expects. The fatal ones are
    /// what `classify` and `parseFlags` refuse; the others are what they read leniently.
    public static func flagsAnswerDeviations(status: Int, body: [UInt8]) -> [Deviation] {
        var out: [Deviation] = []
        if status != 200 { out.append(Deviation("(HTTP status)", "\(status), expected 200", fatal: true)) }
        guard let envelope = body.withUnsafeBytes({ try? JSONReader.parse($0) }) else {
            out.append(Deviation("(body)", "not JSON", fatal: true))
            return out
        }
        guard let top = envelope.objectValue else {
            out.append(Deviation("(body)", "\(envelope.kindName), expected an object", fatal: true))
            return out
        }
        switch top["status_code"] {
        case nil: out.append(Deviation("status_code", "missing", fatal: true))
        case .number(let n) where n == 200: break
        case .number(let n):
            out.append(Deviation("status_code", "\(Int(exactly: n).map(String.init) ?? String(n)), expected 200", fatal: true))
        case let other?: out.append(Deviation("status_code", "\(other.kindName), expected a number", fatal: true))
        }
        if let message = top["status_message"], message.stringValue == nil {
            out.append(Deviation("status_message", "\(message.kindName), expected a string", fatal: false))
        }
        for key in top.keys.sorted() where !["status_code", "status_message", "response", "base_url"].contains(key) {
            out.append(Deviation(key, "not in the contract (ignored)", fatal: false))
        }
        guard let rawResponse = top["response"] else {
            out.append(Deviation("response", "missing", fatal: true))
            return out
        }
        guard let response = rawResponse.objectValue else {
            out.append(Deviation("response", "\(rawResponse.kindName), expected an object", fatal: true))
            return out
        }
        if let partial = response["partial"], partial.boolValue == nil, !partial.isNull {
            out.append(Deviation("response.partial", "\(partial.kindName), expected a boolean", fatal: true))
        }
        for key in response.keys.sorted() where !["flags", "partial", "base_url"].contains(key) {
            out.append(Deviation("response.\(key)", "not in the contract (ignored)", fatal: false))
        }
        guard let rawFlags = response["flags"], !rawFlags.isNull else {
            out.append(Deviation("response.flags", "missing (read as no flags: a plan without feature flags)", fatal: false))
            return out
        }
        guard let flags = rawFlags.arrayValue else {
            out.append(Deviation("response.flags", "\(rawFlags.kindName), expected an array", fatal: true))
            return out
        }
        var seen: [String: Int] = [:]
        for (index, item) in flags.enumerated() {
            let path = "response.flags[\(index)]"
            guard let flag = item.objectValue else {
                out.append(Deviation(path, "\(item.kindName), expected an object", fatal: true))
                continue
            }
            switch flag["key"] {
            case nil: out.append(Deviation(path + ".key", "missing", fatal: true))
            case .string(let key):
                if let first = seen[key] {
                    out.append(Deviation(path + ".key", "\"\(key)\" again (response.flags[\(first)]); the last one wins", fatal: false))
                }
                seen[key] = index
            case let other?: out.append(Deviation(path + ".key", "\(other.kindName), expected a string", fatal: true))
            }
            switch flag["enabled"] {
            case nil: out.append(Deviation(path + ".enabled", "missing", fatal: true))
            case .bool: break
            case let other?: out.append(Deviation(path + ".enabled", "\(other.kindName), expected a boolean", fatal: true))
            }
            switch flag["rule_id"] {
            case nil: out.append(Deviation(path + ".rule_id", "missing (served as \"\")", fatal: false))
            case .string: break
            case let other?: out.append(Deviation(path + ".rule_id", "\(other.kindName), expected a string (served as \"\")", fatal: false))
            }
            if let properties = flag["properties"], properties.objectValue == nil {
                out.append(Deviation(path + ".properties", "\(properties.kindName), expected an object (served as {})", fatal: false))
            }
            for key in flag.keys.sorted() where !["key", "enabled", "rule_id", "properties"].contains(key) {
                out.append(Deviation(path + ".\(key)", "not in the contract (ignored)", fatal: false))
            }
        }
        return out
    }
}
