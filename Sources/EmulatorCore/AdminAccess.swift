import AgentCore
import Foundation

/// Who may use the admin API, how much a request may carry, and what the request log must
/// never show. With `adminToken` set, every `/admin/…` request needs
/// `Authorization: Bearer TOKEN` (401 otherwise, before its body is read); the log keeps
/// each `Authorization` header's scheme only, and neither token anywhere.
extension EmulatorConfiguration {
    /// Largest device API request body (`/json/1.3/…`): a device's call is a few hundred bytes.
    public static let maxDeviceBodyBytes = 1 << 20
    /// Largest admin request body: an application with many flags, a saved lab.
    public static let maxAdminBodyBytes = 8 << 20

    /// Whether `path` is the admin API's (`/admin` and below).
    /// The admin API (`/admin/*`) and the lab's (`/lab/*`, docs/lab.md M): one token locks both.
    public static func isAdmin(_ path: String) -> Bool { path == "/admin" || path.hasPrefix("/admin/") || LabCommand.isLab(path) }

    /// The body limit for a request to `path`.
    public static func maxBodyBytes(path: String) -> Int { isAdmin(path) ? maxAdminBodyBytes : maxDeviceBodyBytes }

    /// Whether a request to `path` with `headers` may proceed: anything outside `/admin`, and
    /// an admin request that carries the admin token (or any, without one).
    public func authorized(path: String, headers: [HTTPHeader]) -> Bool {
        guard let token = adminToken, Self.isAdmin(path) else { return true }
        guard let value = headers.value(named: "authorization"), let given = BearerToken.from(authorization: value) else { return false }
        return BearerToken.matches(given, Array(token.utf8))
    }

    /// The 401 for an admin request without the token.
    public static let unauthorized = Outcome.error(401, "the admin API needs Authorization: Bearer TOKEN (--admin-token)",
                                                   headers: [HTTPHeader("WWW-Authenticate", "Bearer")])

    // MARK: - Redaction

    static let redacted = "[redacted]"

    /// Headers as the request log keeps them: an `Authorization` value keeps its scheme only
    /// (`Token [redacted]`), and neither token appears in any other header.
    public func redact(_ headers: [HTTPHeader]) -> [HTTPHeader] {
        headers.map { h in
            if h.isNamed("authorization") {
                let scheme = h.value.split(separator: " ", maxSplits: 1).first.map(String.init) ?? ""
                return HTTPHeader(h.name, scheme.isEmpty || scheme == h.value ? Self.redacted : scheme + " " + Self.redacted)
            }
            return HTTPHeader(h.name, redactSecrets(h.value))
        }
    }

    /// A recorded body with every occurrence of either token in its strings (keys included) replaced.
    public func redact(_ body: JSONValue) -> JSONValue {
        guard requireToken != nil || adminToken != nil else { return body }
        switch body {
        case .string(let s): return .string(redactSecrets(s))
        case .array(let items): return .array(items.map(redact))
        case .object(let o):
            var out: [String: JSONValue] = [:]
            for (k, v) in o { out[redactSecrets(k)] = redact(v) }
            return .object(out)
        default: return body
        }
    }

    func redactSecrets(_ text: String) -> String {
        var text = text
        for secret in [requireToken, adminToken].compactMap({ $0 }) where !secret.isEmpty && text.contains(secret) {
            text = text.replacingOccurrences(of: secret, with: Self.redacted)
        }
        return text
    }
}
