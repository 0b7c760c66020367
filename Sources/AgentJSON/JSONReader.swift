/// A step from a JSON value into one of its members or elements.
public enum JSONPathComponent: Sendable, Hashable {
    case key(String)
    case index(Int)
}

/// Why a byte sequence is not one JSON value (RFC 8259).
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Byte offset where the problem was found.
    public var offset: Int
    public var reason: String
    /// The object holding a duplicate key (only with `DuplicateKeys.reject`).
    public var path: [JSONPathComponent] = []
    /// The key that appeared twice in one object (`DuplicateKeys.reject` and `.rejectKey`).
    public var duplicateKey: String?

    public init(offset: Int, reason: String, path: [JSONPathComponent] = [], duplicateKey: String? = nil) {
        self.offset = offset
        self.reason = reason
        self.path = path
        self.duplicateKey = duplicateKey
    }

    public var description: String { "\(reason) at byte \(offset)" }
}

/// A strict RFC 8259 parser straight from bytes into `JSONValue`: the request
/// path of the socket API. Faster than `JSONDecoder` (no `Data` copy, no
/// decoder containers: 6x or more on an `isEnabled` request in a release build)
/// and kept honest by differential tests against `JSONDecoder`.
///
/// Strict: one value with optional surrounding whitespace, no trailing commas,
/// no leading zeros, no NaN/Infinity, no raw control characters in strings,
/// valid UTF-8 only, lone surrogate escapes refused, numbers that overflow a
/// Double refused, nesting at most `maximumDepth`. A duplicate object key (two keys equal as
/// Swift strings, escapes decoded: `"a"` and `"\u0061"` are one key; `"a\u0000"` is another):
/// the last one wins (as JSONSerialization and docs/device-api.md A.3; JSONDecoder keeps the
/// first), or, when asked, an error naming it.
public enum JSONReader {
    public static let maximumDepth = 512

    /// What a key that appears twice in one object means.
    public enum DuplicateKeys: Sendable {
        /// The last one wins (docs/device-api.md A.3).
        case lastWins
        /// An error naming the object's path (the emulator's definitions, docs/emulator.md D.1).
        case reject
        /// An error naming the key, not its path (a JSON-RPC request, docs/socket-api.md B: one
        /// reading of each request). Costs one comparison per object: the socket's hot path
        /// tracks no path.
        case rejectKey
    }

    public static func parse(_ bytes: UnsafeRawBufferPointer, duplicateKeys: DuplicateKeys = .lastWins) throws(JSONParseError) -> JSONValue {
        var parser = try Parser(bytes)
        parser.tracksPath = duplicateKeys == .reject
        parser.rejectsDuplicates = duplicateKeys != .lastWins
        let value = try parser.parseValue()
        try parser.end()
        return value
    }

    public static func parse(_ bytes: [UInt8], duplicateKeys: DuplicateKeys = .lastWins) throws(JSONParseError) -> JSONValue {
        try withUnsafeBytesTyped(bytes) { (raw) throws(JSONParseError) in try parse(raw, duplicateKeys: duplicateKeys) }
    }

    public static func parse(_ text: String, duplicateKeys: DuplicateKeys = .lastWins) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8), duplicateKeys: duplicateKeys)
    }
}

/// `Array.withUnsafeBytes` rethrows untyped errors; this keeps the typed throw.
@inline(__always)
func withUnsafeBytesTyped<R, E: Error>(
    _ bytes: [UInt8], _ body: (UnsafeRawBufferPointer) throws(E) -> R
) throws(E) -> R {
    let result: Result<R, E> = bytes.withUnsafeBytes { raw in
        do throws(E) { return .success(try body(raw)) } catch { return .failure(error) }
    }
    return try result.get()
}

/// The one parser behind `JSONReader` and `JSONCursor`: whole values, objects' members, and
/// (JSONParser+Scalars.swift) strings, numbers and literals.
struct Parser {
    let p: UnsafePointer<UInt8>
    let count: Int
    var i = 0
    var depth = 0
    /// Set to reject duplicate keys; the path is tracked only then (the socket's hot path does not pay for it).
    var tracksPath = false
    /// Set to reject duplicate keys (with or without the path).
    var rejectsDuplicates = false
    var path: [JSONPathComponent] = []
    /// The members read so far of the objects being parsed, innermost last: each object's
    /// dictionary is made once at its final size, instead of growing (and rehashing every
    /// key) as members come in.
    var pending: [(key: String, value: JSONValue)] = []

    /// A parser at the start of `bytes`, which must hold one JSON value.
    init(_ bytes: UnsafeRawBufferPointer) throws(JSONParseError) {
        guard let base = bytes.baseAddress, bytes.count > 0 else {
            throw JSONParseError(offset: 0, reason: "empty input")
        }
        p = base.assumingMemoryBound(to: UInt8.self)
        count = bytes.count
    }

    /// After the value: only whitespace may follow.
    mutating func end() throws(JSONParseError) {
        skipWhitespace()
        if i != count { throw JSONParseError(offset: i, reason: "unexpected data after the JSON value") }
    }

    func fail(_ reason: String, at offset: Int? = nil) -> JSONParseError {
        JSONParseError(offset: offset ?? i, reason: reason)
    }

    @inline(__always)
    mutating func skipWhitespace() {
        while i < count {
            let c = p[i]
            if c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 { i += 1 } else { return }
        }
    }

    mutating func parseValue() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        guard i < count else { throw fail("unexpected end of input") }
        switch p[i] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw fail("unexpected character")
        }
    }

    mutating func enter() throws(JSONParseError) {
        depth += 1
        if depth > JSONReader.maximumDepth { throw fail("nesting deeper than \(JSONReader.maximumDepth)") }
    }

    /// At `{`: enters the object and reads its `{`; false when the object is empty (its `}`
    /// read too, and left).
    mutating func beginObject() throws(JSONParseError) -> Bool {
        try enter()
        i += 1  // {
        skipWhitespace()
        if i < count && p[i] == UInt8(ascii: "}") {
            i += 1
            depth -= 1
            return false
        }
        return true
    }

    /// A member's key and its `:`; leaves `i` before the value.
    mutating func memberKey() throws(JSONParseError) -> StringToken {
        skipWhitespace()
        guard i < count, p[i] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
        let key = try parseStringToken()
        skipWhitespace()
        guard i < count, p[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
        i += 1
        return key
    }

    /// After a member's value: true when another member follows (its `,` read), false at the
    /// object's end (its `}` read, and the object left).
    mutating func nextMember() throws(JSONParseError) -> Bool {
        skipWhitespace()
        guard i < count else { throw fail("unexpected end of input in an object") }
        if p[i] == UInt8(ascii: ",") { i += 1; return true }
        if p[i] == UInt8(ascii: "}") { i += 1; depth -= 1; return false }
        throw fail("expected ',' or '}'")
    }

    mutating func parseObject() throws(JSONParseError) -> JSONValue {
        guard try beginObject() else { return .object([:]) }
        // The members are collected on `pending`, shared by the whole parse, and each object's
        // dictionary is made once at its final size (growing it rehashed every key as members
        // came in). Without `tracksPath` a duplicate key's last value wins; with it, a duplicate
        // is refused.
        if pending.capacity == 0 { pending.reserveCapacity(16) }  // one allocation for a small document
        let first = pending.count
        var seen: Set<String> = []
        repeat {
            let key = try memberKey().string
            if tracksPath {
                guard seen.insert(key).inserted else {
                    throw JSONParseError(offset: i, reason: "duplicate key \"\(key)\"", path: path, duplicateKey: key)
                }
                path.append(.key(key))
            }
            let value = try parseValue()
            if tracksPath { path.removeLast() }
            pending.append((key, value))
        } while try nextMember()
        var members = Self.emptyObject(room: pending.count - first)
        for k in first..<pending.count { members[pending[k].key] = pending[k].value }
        if rejectsDuplicates, members.count != pending.count - first {
            // Fewer members than keys read: one came twice. Which one is looked for only now.
            var seen: Set<String> = []
            for k in first..<pending.count where !seen.insert(pending[k].key).inserted {
                throw JSONParseError(offset: i, reason: "duplicate key \"\(pending[k].key)\"", duplicateKey: pending[k].key)
            }
        }
        pending.removeSubrange(first...)
        return .object(members)
    }

    /// Empty objects with room for 3, 6 and 12 members: an object of that size starts as a copy of
    /// one, which costs less than making a dictionary (no generic metadata lookup, no new hash
    /// seed: about 300 instructions of 800 in a release build).
    static let roomFor3 = [String: JSONValue](minimumCapacity: 3)
    static let roomFor6 = [String: JSONValue](minimumCapacity: 6)
    static let roomFor12 = [String: JSONValue](minimumCapacity: 12)

    /// An empty object with room for `count` members (copied when the first is added).
    static func emptyObject(room count: Int) -> [String: JSONValue] {
        count <= 3 ? roomFor3 : count <= 6 ? roomFor6 : count <= 12 ? roomFor12 : [String: JSONValue](minimumCapacity: count)
    }

    mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enter()
        i += 1  // [
        var elements: [JSONValue] = []
        skipWhitespace()
        if i < count && p[i] == UInt8(ascii: "]") {
            i += 1
            depth -= 1
            return .array(elements)
        }
        while true {
            if tracksPath {
                path.append(.index(elements.count))
                elements.append(try parseValue())
                path.removeLast()
            } else {
                elements.append(try parseValue())
            }
            skipWhitespace()
            guard i < count else { throw fail("unexpected end of input in an array") }
            if p[i] == UInt8(ascii: ",") { i += 1; continue }
            if p[i] == UInt8(ascii: "]") { i += 1; break }
            throw fail("expected ',' or ']'")
        }
        depth -= 1
        return .array(elements)
    }
}
