import AgentCore
import Foundation

/// Replaces the secrets of recorded exchanges with placeholders (docs/real-pushwoosh.md,
/// "Recording a session"), the same value always with the same one (`HWID-1`, `USER-1`,
/// `PUSH-TOKEN-1`, `API-TOKEN-1`), so one device's calls still match each other:
/// - the values of the keys `hwid`, `userId` and `push_token` in any case and spelling
///   (`HWID`, `user_id`, `UserID`, `pushToken`), strings and numbers alike, anywhere in a JSON
///   body or a form body (`application/x-www-form-urlencoded`);
/// - the values of the headers `Authorization` and `Proxy-Authorization` (the scheme is kept:
///   `Token API-TOKEN-1`), `X-Api-Key` (`API-KEY-1`), `Cookie` and `Set-Cookie` (`COOKIE-1`),
///   names compared case-insensitively;
/// - the credentials of a URL (`https://USER:PASSWORD@host/` → `https://URL-CREDENTIALS-1@host/`);
/// - then every further occurrence of a value already replaced (six characters or more) in
///   URLs, headers and bodies.
/// A recording appended to continues the numbering it finds in the file
/// (`init(continuingFrom:)`), so two devices never share a placeholder.
public struct Redactor: Sendable {
    private var placeholders: [String: String] = [:]
    private var counts: [String: Int] = [:]

    /// Placeholder kinds by key, the key folded (`kind(ofKey:)`): lowercase, without `_` and `-`.
    static let keys = ["hwid": "HWID", "userid": "USER", "pushtoken": "PUSH-TOKEN"]
    /// Headers whose value is a secret, and the kind of its placeholder.
    static let headers = [("authorization", "API-TOKEN"), ("proxy-authorization", "PROXY-AUTHORIZATION"),
                          ("x-api-key", "API-KEY"), ("cookie", "COOKIE"), ("set-cookie", "COOKIE")]
    /// Every kind of placeholder, for `highestNumbers`.
    public static let kinds = ["HWID", "USER", "PUSH-TOKEN", "API-TOKEN", "PROXY-AUTHORIZATION", "API-KEY", "COOKIE", "URL-CREDENTIALS"]

    /// - Parameter counts: the highest number already used per kind (`highestNumbers` of the
    ///   file appended to): new placeholders continue after it.
    public init(continuingFrom counts: [String: Int] = [:]) {
        self.counts = counts
    }

    mutating func placeholder(_ value: String, kind: String) -> String {
        if let known = placeholders[value] { return known }
        let n = counts[kind, default: 0] + 1
        counts[kind] = n
        let name = "\(kind)-\(n)"
        placeholders[value] = name
        return name
    }

    /// `userId`, `user_id`, `UserID` and `USER-ID` are one key: lowercase, `_` and `-` dropped.
    static func kind(ofKey key: String) -> String? {
        keys[key.lowercased().filter { $0 != "_" && $0 != "-" }]
    }

    /// The secret part of a header's value: after the scheme for authorization headers.
    private static func secretPart(of header: HTTPHeader) -> (kind: String, prefix: String, secret: String)? {
        guard let kind = headers.first(where: { header.isNamed($0.0) })?.1 else { return nil }
        if kind == "API-TOKEN" || kind == "PROXY-AUTHORIZATION", let space = header.value.firstIndex(of: " ") {
            return (kind, String(header.value[...space]), String(header.value[header.value.index(after: space)...]))
        }
        return (kind, "", header.value)
    }

    /// Learns the secrets of one request or answer (its headers, and its JSON or form body)
    /// before anything of it is written.
    public mutating func learn(headers: [HTTPHeader], body: [UInt8]) {
        for h in headers {
            if let part = Self.secretPart(of: h), !part.secret.isEmpty { _ = placeholder(part.secret, kind: part.kind) }
        }
        if let json = try? StrictJSONParser.parse(body) {
            learn(json)
        } else if let pairs = Self.form(body, contentType: headers.value(named: "content-type")) {
            for (name, value) in pairs {
                if let kind = Self.kind(ofKey: Self.decoded(name)), !value.isEmpty { _ = placeholder(Self.decoded(value), kind: kind) }
            }
        }
    }

    /// Learns the credentials of a URL (`scheme://USER:PASSWORD@host/…`): the whole user
    /// information, and its password on its own.
    public mutating func learn(url: String) {
        guard let info = Self.userInfo(url) else { return }
        _ = placeholder(String(url[info]), kind: "URL-CREDENTIALS")
        if let colon = url[info].firstIndex(of: ":"), url.index(after: colon) < info.upperBound {
            _ = placeholder(String(url[url.index(after: colon)..<info.upperBound]), kind: "URL-CREDENTIALS")
        }
    }

    private mutating func learn(_ value: JSONValue) {
        switch value {
        case .object(let o):
            // A fixed order (hwid, userId, push_token, then the rest by name): the same body
            // always gives the same placeholders.
            let rank = ["HWID": 0, "USER": 1, "PUSH-TOKEN": 2]
            func order(_ key: String) -> Int { Self.kind(ofKey: key).flatMap { rank[$0] } ?? 3 }
            for (k, v) in o.sorted(by: { (order($0.key), $0.key) < (order($1.key), $1.key) }) {
                if let kind = Self.kind(ofKey: k), let secret = Self.scalarText(v), !secret.isEmpty { _ = placeholder(secret, kind: kind) }
                learn(v)
            }
        case .array(let a): a.forEach { learn($0) }
        default: break
        }
    }

    /// A string's text, or a number's as JSON writes it (`12345`): the values a secret key may have.
    static func scalarText(_ value: JSONValue) -> String? {
        switch value {
        case .string(let s): s
        case .number: JSONWriter.string(value)
        default: nil
        }
    }

    /// `text` with every learned secret replaced.
    public func redact(_ text: String) -> String {
        var out = text
        for (value, name) in placeholders.sorted(by: { $0.key.count > $1.key.count }) {
            if out == value { return name }
            if value.count >= 6, out.contains(value) {
                out = out.split(separator: value, omittingEmptySubsequences: false).joined(separator: name)
            }
        }
        return out
    }

    /// A URL with its credentials replaced (whatever their length), then as `redact`.
    public func redact(url: String) -> String {
        guard let info = Self.userInfo(url), let name = placeholders[String(url[info])] else { return redact(url) }
        return redact(url.replacingCharacters(in: info, with: name))
    }

    /// A URL with its credentials, if any, shown as `[redacted]` (for logs).
    public static func hidingCredentials(_ url: String) -> String {
        guard let info = userInfo(url) else { return url }
        return url.replacingCharacters(in: info, with: "[redacted]")
    }

    /// The range of `USER:PASSWORD` in `scheme://USER:PASSWORD@host/…`.
    static func userInfo(_ url: String) -> Range<String.Index>? {
        guard let scheme = url.range(of: "://") else { return nil }
        let rest = url[scheme.upperBound...]
        let authority = rest[..<(rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex)]
        guard let at = authority.lastIndex(of: "@"), at > authority.startIndex else { return nil }
        return authority.startIndex..<at
    }

    /// A body with the secrets replaced: JSON (the secret keys' values whole, other strings by
    /// `redact`), a form body (the same, pair by pair), else as text.
    public func redactBody(_ body: [UInt8], contentType: String? = nil) -> String {
        if let json = try? StrictJSONParser.parse(body) { return JSONWriter.string(redact(json)) }
        if let pairs = Self.form(body, contentType: contentType) {
            return pairs.map { name, value in
                let known = placeholders[Self.decoded(value)]
                if Self.kind(ofKey: Self.decoded(name)) != nil { return "\(name)=\(known ?? "[redacted]")" }
                return "\(name)=\(known ?? redact(value))"
            }.joined(separator: "&")
        }
        return redact(String(decoding: body, as: UTF8.self))
    }

    func redact(_ value: JSONValue, key: String? = nil) -> JSONValue {
        if let key, Self.kind(ofKey: key) != nil, let secret = Self.scalarText(value) {
            return .string(placeholders[secret] ?? (secret.isEmpty ? "" : "[redacted]"))
        }
        switch value {
        case .string(let s): return .string(placeholders[s] ?? redact(s))
        case .number:
            guard let text = Self.scalarText(value), text.count >= 6, let name = placeholders[text] else { return value }
            return .string(name)
        case .array(let a): return .array(a.map { redact($0) })
        case .object(let o): return .object(Dictionary(uniqueKeysWithValues: o.map { ($0.key, redact($0.value, key: $0.key)) }))
        default: return value
        }
    }

    public func redact(_ headers: [HTTPHeader]) -> [HTTPHeader] {
        headers.map { h in
            if let part = Self.secretPart(of: h) {
                return HTTPHeader(h.name, part.prefix + (placeholders[part.secret] ?? (part.secret.isEmpty ? "" : "[redacted]")))
            }
            return HTTPHeader(h.name, redact(h.value))
        }
    }

    // MARK: - Form bodies

    /// The pairs of an `application/x-www-form-urlencoded` body, as sent (still encoded): when
    /// the content type says so, or when the body reads as one and names a secret key; else nil.
    static func form(_ body: [UInt8], contentType: String?) -> [(name: String, value: String)]? {
        guard !body.isEmpty, body.count <= 1 << 20, !body.contains(where: { $0 <= 0x20 || $0 >= 0x7F }) else { return nil }
        var pairs: [(name: String, value: String)] = []
        for piece in String(decoding: body, as: UTF8.self).split(separator: "&", omittingEmptySubsequences: false) {
            guard let eq = piece.firstIndex(of: "=") else { return nil }
            pairs.append((String(piece[..<eq]), String(piece[piece.index(after: eq)...])))
        }
        let declared = contentType?.lowercased().contains("application/x-www-form-urlencoded") == true
        guard declared || pairs.contains(where: { kind(ofKey: decoded($0.name)) != nil }) else { return nil }
        return pairs
    }

    /// A form name or value decoded (`+` is a space); as sent when it is not valid percent-encoding.
    static func decoded(_ text: String) -> String {
        let spaced = text.replacingOccurrences(of: "+", with: " ")
        return spaced.removingPercentEncoding ?? spaced
    }

    // MARK: - Continuing a recording

    /// The highest number of each kind of placeholder (`HWID-7`) in `bytes`, a recording's text,
    /// merged into `counts`. A kind counts only where it begins a word (not `SUPERUSER-5`); a
    /// number of more than nine digits is not one of ours and is skipped.
    public static func highestNumbers(in bytes: UnsafeRawBufferPointer, into counts: inout [String: Int]) {
        let kinds = Self.kinds.map { Array($0.utf8) }
        func wordByte(_ b: UInt8) -> Bool {
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2D || b == 0x5F
        }
        guard let base = bytes.baseAddress else { return }
        var i = 0
        while i < bytes.count {
            // Straight to the next "-" (memchr: a recording of hundreds of MB is read in a blink).
            guard let dash = memchr(base + i, Int32(UInt8(ascii: "-")), bytes.count - i) else { return }
            i = base.distance(to: UnsafeRawPointer(dash))
            defer { i += 1 }
            // A placeholder's kind ends in a capital letter and its number starts with a digit
            // (a date's dashes stop here).
            guard i > 0, bytes[i - 1] >= 0x41, bytes[i - 1] <= 0x5A, i + 1 < bytes.count, bytes[i + 1] >= 0x30, bytes[i + 1] <= 0x39 else {
                continue
            }
            for (k, kind) in kinds.enumerated() where i >= kind.count {
                let start = i - kind.count
                guard (0..<kind.count).allSatisfy({ bytes[start + $0] == kind[$0] }),
                      start == 0 || !wordByte(bytes[start - 1]) else { continue }
                var n = 0, digits = 0, j = i + 1
                while j < bytes.count, bytes[j] >= 0x30, bytes[j] <= 0x39, digits <= 9 {
                    n = n * 10 + Int(bytes[j] - 0x30)
                    digits += 1
                    j += 1
                }
                if digits <= 9, j == bytes.count || !wordByte(bytes[j]) { counts[Self.kinds[k]] = max(counts[Self.kinds[k], default: 0], n) }
            }
        }
    }
}
