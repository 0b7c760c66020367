import FoundationEssentials

/// The Pushwoosh device API, `json/1.3` (docs/device-api.md A): request bodies, the envelope and
/// the success rule, error classification (RF-7) and the `getFeatureFlags` response (A.3,
/// assumed — kept in this file and PushwooshAPI+Answer.swift, the one walk of an answer, so it
/// can follow the real server).
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

    /// Whether the server at `baseURL` is on this host (`localhost`, 127.0.0.0/8, `::1`): a lab's
    /// emulator, not a real Pushwoosh (docs/device-clock.md H: long advances against another
    /// host need `allowRemote`).
    public static func isLoopback(baseURL: String) -> Bool {
        guard var host = URL(string: baseURL)?.host?.lowercased() else { return false }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host == "localhost" || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
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
            var refusal: AnswerFinding?
            let parsed = walkEnvelope(body, lenient: false) { finding in
                refusal = finding
                return false  // without `lenient`, every finding is fatal
            }
            guard let envelope = parsed, refusal == nil else {
                return .failure(Failure(code: 200, message: refusal?.agentText ?? "answer is not JSON", retryable: false))
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
        var refusal: AnswerFinding?
        let flags = walkFlagsResponse(response, lenient: false) { finding in
            refusal = finding
            return false  // without `lenient`, every finding is fatal
        }
        if let flags { return .success(flags) }
        let why = refusal?.agentText ?? "response is missing (absent or null)"
        return .failure(Failure(code: 200, message: "unusable flags response: \(why)", retryable: false))
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
