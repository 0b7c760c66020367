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

    /// Parses A.3's `response`. Unusable answers are failures with code 200 (RF-7), naming the
    /// first place that makes it so. Duplicate keys: the last one wins.
    public static func parseFlags(_ response: JSONValue) -> Result<FlagsResponse, Failure> {
        var refusal: ResponseFinding?
        let flags = walkFlagsResponse(response, lenient: false) { finding in
            refusal = finding
            return false  // without `lenient`, every finding is fatal
        }
        if let flags { return .success(flags) }
        let why = refusal?.agentText ?? "response is missing (absent or null)"
        return .failure(Failure(code: 200, message: "unusable flags response: \(why)", retryable: false))
    }

    /// A place where a `getFeatureFlags` answer's `response` departs from A.3, as the one walk of
    /// it finds it (`walkFlagsResponse`): the agent's refusal (RF-7) and `--doctor`'s deviations
    /// are two renderings of the same findings.
    struct ResponseFinding {
        enum Kind {
            case missing
            case wrongKind(expected: String, found: JSONValue)
            case notInContract
            /// A flag key seen before, at `previous` (the last one wins).
            case repeatedKey(String, previous: Int)
        }

        var path: String
        var kind: Kind
        /// The agent cannot use the answer.
        var fatal = true
        /// How the agent reads a lenient finding, as the doctor says it (` (served as "")`).
        var handling = ""
        /// What the agent's refusal adds (`flag k`).
        var detail: String?

        /// The agent's words; a null counts as missing.
        var agentText: String {
            switch kind {
            case .missing, .wrongKind(_, .null): "\(path) is missing" + (detail.map { " (\($0))" } ?? "")
            case .wrongKind(let expected, let found): "\(path) is not \(expected): found \(PushwooshAPI.found(found))"
            case .notInContract, .repeatedKey: deviation.problem
            }
        }

        /// The doctor's words.
        var deviation: Deviation {
            let problem = switch kind {
            case .missing: "missing"
            case .wrongKind(let expected, let found): "\(found.kindName), expected \(expected)"
            case .notInContract: "not in the contract (ignored)"
            case .repeatedKey(let key, let previous): "\"\(key)\" again (response.flags[\(previous)])"
            }
            return Deviation(path, problem + handling, fatal: fatal)
        }
    }

    /// Walks A.3's `response` in document order, handing each finding to `report`, which says
    /// whether to go on. Without `lenient` only the fatal findings are looked for (the agent's
    /// parse, every refresh); with it also what the agent reads leniently: members not in the
    /// contract, a missing `rule_id`, a repeated key. The flags, when nothing fatal was found.
    static func walkFlagsResponse(_ response: JSONValue?, lenient: Bool,
                                  report: (ResponseFinding) -> Bool) -> FlagsResponse? {
        var fatal = false
        func found(_ finding: ResponseFinding) -> Bool {
            fatal = fatal || finding.fatal
            return report(finding)
        }
        guard let response else { _ = found(ResponseFinding(path: "response", kind: .missing, detail: "absent or null")); return nil }
        guard let object = response.objectValue else {
            _ = found(ResponseFinding(path: "response", kind: .wrongKind(expected: "an object", found: response), detail: "absent or null"))
            return nil
        }
        var partial = false
        switch object["partial"] {
        case nil, .null?: break
        case .bool(let b)?: partial = b
        case let other?:
            guard found(ResponseFinding(path: "response.partial", kind: .wrongKind(expected: "a boolean", found: other))) else { return nil }
        }
        if lenient {
            for key in object.keys.sorted() where !["flags", "partial", "base_url"].contains(key) {
                guard found(ResponseFinding(path: "response.\(key)", kind: .notInContract, fatal: false)) else { return nil }
            }
        }
        guard let rawFlags = object["flags"], !rawFlags.isNull else {
            // FF-7: a plan without feature flags: a valid, complete, empty set.
            if lenient {
                let finding = ResponseFinding(path: "response.flags", kind: .missing, fatal: false,
                                              handling: " (read as no flags: a plan without feature flags)")
                guard found(finding) else { return nil }
            }
            return fatal ? nil : FlagsResponse(flags: [:], partial: partial)
        }
        guard let list = rawFlags.arrayValue else {
            _ = found(ResponseFinding(path: "response.flags", kind: .wrongKind(expected: "an array", found: rawFlags)))
            return nil
        }
        var flags: [String: FeatureFlag] = [:]
        var lastIndex: [String: Int] = [:]
        for (index, item) in list.enumerated() {
            let path = "response.flags[\(index)]"
            guard let member = item.objectValue else {
                guard found(ResponseFinding(path: path, kind: .wrongKind(expected: "an object", found: item))) else { return nil }
                continue
            }
            var key: String?
            switch member["key"] {
            case nil: guard found(ResponseFinding(path: path + ".key", kind: .missing)) else { return nil }
            case .string(let k)?:
                key = k
                if lenient {
                    if let previous = lastIndex[k] {
                        let finding = ResponseFinding(path: path + ".key", kind: .repeatedKey(k, previous: previous), fatal: false,
                                                      handling: "; the last one wins")
                        guard found(finding) else { return nil }
                    }
                    lastIndex[k] = index
                }
            case let other?: guard found(ResponseFinding(path: path + ".key", kind: .wrongKind(expected: "a string", found: other))) else { return nil }
            }
            var enabled: Bool?
            switch member["enabled"] {
            case .bool(let b)?: enabled = b
            case let other:
                let kind: ResponseFinding.Kind = other.map { .wrongKind(expected: "a boolean", found: $0) } ?? .missing
                guard found(ResponseFinding(path: path + ".enabled", kind: kind, detail: key.map { "flag \($0)" })) else { return nil }
            }
            var ruleId = ""
            switch member["rule_id"] {
            case .string(let r)?: ruleId = r
            case let other:
                let kind: ResponseFinding.Kind = other.map { .wrongKind(expected: "a string", found: $0) } ?? .missing
                if lenient, !found(ResponseFinding(path: path + ".rule_id", kind: kind, fatal: false, handling: " (served as \"\")")) { return nil }
            }
            let properties = member["properties"]?.objectValue
            if lenient, let raw = member["properties"], properties == nil {
                let finding = ResponseFinding(path: path + ".properties", kind: .wrongKind(expected: "an object", found: raw), fatal: false,
                                              handling: " (served as {})")
                guard found(finding) else { return nil }
            }
            if lenient {
                for name in member.keys.sorted() where !["key", "enabled", "rule_id", "properties"].contains(name) {
                    guard found(ResponseFinding(path: path + ".\(name)", kind: .notInContract, fatal: false)) else { return nil }
                }
            }
            if let key, let enabled {
                flags[key] = FeatureFlag(key: key, isEnabled: enabled, ruleId: ruleId, properties: properties ?? [:])
            }
        }
        return fatal ? nil : FlagsResponse(flags: flags, partial: partial)
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
        _ = walkFlagsResponse(top["response"], lenient: true) { finding in
            out.append(finding.deviation)
            return true
        }
        return out
    }
}
