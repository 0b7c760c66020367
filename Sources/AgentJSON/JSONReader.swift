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
        guard let base = bytes.baseAddress, bytes.count > 0 else {
            throw JSONParseError(offset: 0, reason: "empty input")
        }
        var parser = Parser(p: base.assumingMemoryBound(to: UInt8.self), count: bytes.count)
        parser.tracksPath = duplicateKeys == .reject
        parser.rejectsDuplicates = duplicateKeys != .lastWins
        let value = try parser.parseValue()
        parser.skipWhitespace()
        if parser.i != parser.count {
            throw JSONParseError(offset: parser.i, reason: "unexpected data after the JSON value")
        }
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

private struct Parser {
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

    init(p: UnsafePointer<UInt8>, count: Int) {
        self.p = p
        self.count = count
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

    mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let n = word.utf8CodeUnitCount
        guard count - i >= n, memcmpEqual(p + i, word.utf8Start, n) else { throw fail("invalid literal") }
        i += n
    }

    private func memcmpEqual(_ a: UnsafePointer<UInt8>, _ b: UnsafePointer<UInt8>, _ n: Int) -> Bool {
        for k in 0..<n where a[k] != b[k] { return false }
        return true
    }

    mutating func enter() throws(JSONParseError) {
        depth += 1
        if depth > JSONReader.maximumDepth { throw fail("nesting deeper than \(JSONReader.maximumDepth)") }
    }

    mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enter()
        i += 1  // {
        skipWhitespace()
        if i < count && p[i] == UInt8(ascii: "}") {
            i += 1
            depth -= 1
            return .object([:])
        }
        // The members are collected on `pending`, shared by the whole parse, and each object's
        // dictionary is made once at its final size (growing it rehashed every key as members
        // came in). Without `tracksPath` a duplicate key's last value wins; with it, a duplicate
        // is refused.
        if pending.capacity == 0 { pending.reserveCapacity(16) }  // one allocation for a small document
        let first = pending.count
        var seen: Set<String> = []
        while true {
            skipWhitespace()
            guard i < count, p[i] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
            let key = try parseString()
            skipWhitespace()
            guard i < count, p[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            i += 1
            if tracksPath {
                guard seen.insert(key).inserted else {
                    throw JSONParseError(offset: i, reason: "duplicate key \"\(key)\"", path: path, duplicateKey: key)
                }
                path.append(.key(key))
            }
            let value = try parseValue()
            if tracksPath { path.removeLast() }
            pending.append((key, value))
            skipWhitespace()
            guard i < count else { throw fail("unexpected end of input in an object") }
            if p[i] == UInt8(ascii: ",") { i += 1; continue }
            if p[i] == UInt8(ascii: "}") { i += 1; break }
            throw fail("expected ',' or '}'")
        }
        var members = [String: JSONValue](minimumCapacity: pending.count - first)
        for k in first..<pending.count { members[pending[k].key] = pending[k].value }
        if rejectsDuplicates, members.count != pending.count - first {
            // Fewer members than keys read: one came twice. Which one is looked for only now.
            var seen: Set<String> = []
            for k in first..<pending.count where !seen.insert(pending[k].key).inserted {
                throw JSONParseError(offset: i, reason: "duplicate key \"\(pending[k].key)\"", duplicateKey: pending[k].key)
            }
        }
        pending.removeSubrange(first...)
        depth -= 1
        return .object(members)
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

    /// At the opening quote; leaves `i` after the closing quote.
    mutating func parseString() throws(JSONParseError) -> String {
        let open = i
        i += 1
        let start = i
        var ascii = true
        // Fast path: no escapes.
        while i < count {
            let c = p[i]
            if c == UInt8(ascii: "\"") {
                let run = UnsafeBufferPointer(start: p + start, count: i - start)
                i += 1
                if ascii { return String(decoding: run, as: UTF8.self) }
                guard let s = String(validating: run, as: UTF8.self) else {
                    throw fail("invalid UTF-8 in a string", at: start)
                }
                return s
            }
            if c == UInt8(ascii: "\\") || c < 0x20 { break }
            if c >= 0x80 { ascii = false }
            i += 1
        }
        guard i < count else { throw fail("unterminated string", at: open) }
        // Slow path: escapes.
        var buffer: [UInt8] = []
        buffer.reserveCapacity(i - start + 16)
        buffer.append(contentsOf: UnsafeBufferPointer(start: p + start, count: i - start))
        while true {
            guard i < count else { throw fail("unterminated string", at: open) }
            let c = p[i]
            if c == UInt8(ascii: "\"") { i += 1; break }
            if c < 0x20 { throw fail("control character in a string") }
            if c != UInt8(ascii: "\\") {
                buffer.append(c)
                i += 1
                continue
            }
            i += 1
            guard i < count else { throw fail("unterminated escape") }
            let e = p[i]
            i += 1
            switch e {
            case UInt8(ascii: "\""): buffer.append(0x22)
            case UInt8(ascii: "\\"): buffer.append(0x5C)
            case UInt8(ascii: "/"): buffer.append(0x2F)
            case UInt8(ascii: "b"): buffer.append(0x08)
            case UInt8(ascii: "f"): buffer.append(0x0C)
            case UInt8(ascii: "n"): buffer.append(0x0A)
            case UInt8(ascii: "r"): buffer.append(0x0D)
            case UInt8(ascii: "t"): buffer.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if scalar >= 0xD800 && scalar <= 0xDBFF {
                    guard count - i >= 2, p[i] == UInt8(ascii: "\\"), p[i + 1] == UInt8(ascii: "u") else {
                        throw fail("lone surrogate in a \\u escape")
                    }
                    i += 2
                    let low = try hex4()
                    guard low >= 0xDC00 && low <= 0xDFFF else { throw fail("lone surrogate in a \\u escape") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if scalar >= 0xDC00 && scalar <= 0xDFFF {
                    throw fail("lone surrogate in a \\u escape")
                }
                appendUTF8(scalar, to: &buffer)
            default:
                throw fail("invalid escape", at: i - 2)
            }
        }
        guard let s = String(validating: buffer, as: UTF8.self) else {
            throw fail("invalid UTF-8 in a string", at: start)
        }
        return s
    }

    mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard count - i >= 4 else { throw fail("short \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = p[i]
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw fail("invalid \\u escape")
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }

    func appendUTF8(_ scalar: UInt32, to buffer: inout [UInt8]) {
        switch scalar {
        case 0..<0x80:
            buffer.append(UInt8(scalar))
        case 0x80..<0x800:
            buffer.append(UInt8(0xC0 | (scalar >> 6)))
            buffer.append(UInt8(0x80 | (scalar & 0x3F)))
        case 0x800..<0x10000:
            buffer.append(UInt8(0xE0 | (scalar >> 12)))
            buffer.append(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            buffer.append(UInt8(0x80 | (scalar & 0x3F)))
        default:
            buffer.append(UInt8(0xF0 | (scalar >> 18)))
            buffer.append(UInt8(0x80 | ((scalar >> 12) & 0x3F)))
            buffer.append(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            buffer.append(UInt8(0x80 | (scalar & 0x3F)))
        }
    }

    mutating func parseNumber() throws(JSONParseError) -> Double {
        let start = i
        var negative = false
        if p[i] == UInt8(ascii: "-") {
            negative = true
            i += 1
        }
        guard i < count, isDigit(p[i]) else { throw fail("invalid number", at: start) }
        var integer: Int64 = 0
        var digits = 0
        if p[i] == UInt8(ascii: "0") {
            i += 1
            if i < count && isDigit(p[i]) { throw fail("leading zero in a number", at: start) }
            digits = 1
        } else {
            while i < count && isDigit(p[i]) {
                if digits < 18 { integer = integer &* 10 &+ Int64(p[i] - UInt8(ascii: "0")) }
                digits += 1
                i += 1
            }
        }
        var simple = true
        if i < count && p[i] == UInt8(ascii: ".") {
            simple = false
            i += 1
            guard i < count, isDigit(p[i]) else { throw fail("invalid number", at: start) }
            while i < count && isDigit(p[i]) { i += 1 }
        }
        if i < count && (p[i] == UInt8(ascii: "e") || p[i] == UInt8(ascii: "E")) {
            simple = false
            i += 1
            if i < count && (p[i] == UInt8(ascii: "+") || p[i] == UInt8(ascii: "-")) { i += 1 }
            guard i < count, isDigit(p[i]) else { throw fail("invalid number", at: start) }
            while i < count && isDigit(p[i]) { i += 1 }
        }
        if simple && digits <= 15 {
            if negative && integer == 0 { return -0.0 }
            return Double(negative ? -integer : integer)
        }
        let text = String(decoding: UnsafeBufferPointer(start: p + start, count: i - start), as: UTF8.self)
        guard let value = Double(text), value.isFinite else {
            throw fail("number out of range", at: start)
        }
        return value
    }

    @inline(__always)
    func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }
}
