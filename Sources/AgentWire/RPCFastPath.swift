import AgentCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The hot path of the socket API (docs/performance.md): `isEnabled` and `get` requests of
/// the ordinary shape, scanned straight from the line's bytes without building a JSON
/// tree, and their answers written straight into a byte buffer.
///
/// It only ever *recognizes*: a line it does not fully understand — any other method or
/// member, an escape or a non-ASCII byte in a string, a fractional or huge id, a
/// duplicate member, anything after the object — gives nil, and the caller takes the
/// general path (`RPCMessage.parse`), which decides what the line means and which error
/// it gets. For every line it accepts, the request is the one `RPCMessage.parse` yields
/// and the answer bytes (RPCFastPath+Answers.swift) are the ones `RPCEncoder.line` writes
/// for the same result.
public enum RPCFastPath {
    public enum Method: Sendable, Equatable {
        /// `isEnabled` with `key` and the boolean `default`.
        case isEnabled(default: Bool)
        /// `get` with `key`.
        case get
    }

    /// A recognized request: it has an id (never a notification) and valid params.
    public struct Request: Sendable, Equatable {
        public var id: RPCID
        public var method: Method
        public var key: String
    }

    /// Recognizes `line` (without its `\n`), or returns nil.
    public static func scan(_ line: UnsafeRawBufferPointer) -> Request? {
        guard let base = line.baseAddress, line.count > 2 else { return nil }
        var s = Scanner(p: base.assumingMemoryBound(to: UInt8.self), end: line.count)
        if let request = s.canonicalRequest() { return request }
        s.i = 0
        return s.request()
    }

    /// `scan` without the shortcut for the usual shape (tests: both give the same requests).
    static func scanGeneral(_ line: UnsafeRawBufferPointer) -> Request? {
        guard let base = line.baseAddress, line.count > 2 else { return nil }
        var s = Scanner(p: base.assumingMemoryBound(to: UInt8.self), end: line.count)
        return s.request()
    }
}


/// A strict scanner for the subset of JSON the fast path accepts.
private struct Scanner {
    let p: UnsafePointer<UInt8>
    let end: Int
    var i = 0

    private static let quote = UInt8(ascii: "\"")

    // `i` only moves while it is below `end` (a buffer's count): `&+` cannot overflow.
    @inline(__always) mutating func skipWhitespace() {
        while i < end {
            let c = p[i]
            guard c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 else { return }
            i &+= 1
        }
    }

    @inline(__always) mutating func consume(_ c: UInt8) -> Bool {
        if i < end, p[i] == c {  // the usual case: no whitespace before it
            i &+= 1
            return true
        }
        skipWhitespace()
        guard i < end, p[i] == c else { return false }
        i &+= 1
        return true
    }

    /// A string of printable ASCII without escapes; its bytes' range, else nil.
    mutating func simpleString() -> Range<Int>? {
        skipWhitespace()
        guard i < end, p[i] == Self.quote else { return nil }
        i &+= 1
        let start = i
        while i < end {
            let c = p[i]
            if c == Self.quote {
                i &+= 1
                return start..<(i &- 1)
            }
            guard c >= 0x20, c < 0x80, c != UInt8(ascii: "\\") else { return nil }
            i &+= 1
        }
        return nil
    }

    /// The names and values compared are a few bytes long: compared here, not by a call to `memcmp`.
    @inline(__always)
    func equals(_ range: Range<Int>, _ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard range.count == count else { return false }
        let bytes = text.utf8Start
        var k = 0
        while k < count {
            guard p[range.lowerBound &+ k] == bytes[k] else { return false }
            k &+= 1
        }
        return true
    }

    func string(_ range: Range<Int>) -> String {
        String(decoding: UnsafeBufferPointer(start: p + range.lowerBound, count: range.count), as: UTF8.self)
    }

    /// An integer id of at most 15 digits (exact as a Double), no fraction or exponent.
    mutating func integer() -> Double? {
        skipWhitespace()
        var negative = false
        if i < end, p[i] == UInt8(ascii: "-") {
            negative = true
            i &+= 1
        }
        let start = i
        var value: Int64 = 0
        while i < end, p[i] >= UInt8(ascii: "0"), p[i] <= UInt8(ascii: "9") {
            value = value &* 10 &+ Int64(p[i] &- UInt8(ascii: "0"))  // at most 15 digits: no overflow
            i &+= 1
            if i &- start > 15 { return nil }
        }
        let digits = i - start
        guard digits > 0 else { return nil }
        if digits > 1, p[start] == UInt8(ascii: "0") { return nil }  // leading zero: not JSON
        if i < end, p[i] == UInt8(ascii: ".") || p[i] == UInt8(ascii: "e") || p[i] == UInt8(ascii: "E") { return nil }
        if negative, value == 0 { return nil }  // `-0`: the general path echoes it as written
        return Double(negative ? -value : value)
    }

    mutating func boolean() -> Bool? {
        skipWhitespace()
        if end - i >= 4, p[i] == UInt8(ascii: "t"), p[i + 1] == UInt8(ascii: "r"), p[i + 2] == UInt8(ascii: "u"),
           p[i + 3] == UInt8(ascii: "e") {
            i += 4
            return true
        }
        if end - i >= 5, p[i] == UInt8(ascii: "f"), p[i + 1] == UInt8(ascii: "a"), p[i + 2] == UInt8(ascii: "l"),
           p[i + 3] == UInt8(ascii: "s"), p[i + 4] == UInt8(ascii: "e") {
            i += 5
            return false
        }
        return nil
    }

    /// After a member's value: true when another member follows, false at `}`, nil otherwise.
    mutating func memberSeparator() -> Bool? {
        if consume(UInt8(ascii: ",")) { return true }
        if consume(UInt8(ascii: "}")) { return false }
        return nil
    }

    /// The bytes of `text` at `i`, then past them; else false.
    @inline(__always)
    mutating func literal(_ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard end &- i >= count, memcmp(p + i, text.utf8Start, count) == 0 else { return false }
        i &+= count
        return true
    }

    /// The shape clients write (members in this order, no whitespace, a number id):
    /// `{"jsonrpc":"2.0","id":N,"method":"isEnabled","params":{"key":"K","default":B}}` and
    /// `{"jsonrpc":"2.0","id":N,"method":"get","params":{"key":"K"}}`, matched as a few
    /// literals; nil for anything else, which `request()` then reads member by member. Each
    /// piece is one `request()` accepts in the same place (the id and the key by the same
    /// functions), so a line matched here is the request `request()` reads.
    mutating func canonicalRequest() -> RPCFastPath.Request? {
        guard literal(#"{"jsonrpc":"2.0","id":"#), let id = integer() else { return nil }
        if literal(#","method":"isEnabled","params":{"key":"#) {
            guard let key = simpleString(), literal(#","default":"#), let fallback = boolean(), literal("}}"), i == end else {
                return nil
            }
            return RPCFastPath.Request(id: .number(id), method: .isEnabled(default: fallback), key: string(key))
        }
        guard literal(#","method":"get","params":{"key":"#), let key = simpleString(), literal("}}"), i == end else { return nil }
        return RPCFastPath.Request(id: .number(id), method: .get, key: string(key))
    }

    mutating func request() -> RPCFastPath.Request? {
        guard consume(UInt8(ascii: "{")) else { return nil }
        var sawVersion = false
        var id: RPCID?
        var method: Range<Int>?
        var key: Range<Int>?
        var fallback: Bool?
        var sawParams = false
        while true {
            guard let name = simpleString(), consume(UInt8(ascii: ":")) else { return nil }
            if equals(name, "jsonrpc") {
                guard !sawVersion, let value = simpleString(), equals(value, "2.0") else { return nil }
                sawVersion = true
            } else if equals(name, "id") {
                guard id == nil else { return nil }
                skipWhitespace()
                guard i < end else { return nil }
                if p[i] == Self.quote {
                    guard let value = simpleString() else { return nil }
                    id = .string(string(value))
                } else {
                    guard let value = integer() else { return nil }
                    id = .number(value)
                }
            } else if equals(name, "method") {
                guard method == nil, let value = simpleString() else { return nil }
                method = value
            } else if equals(name, "params") {
                guard !sawParams, consume(UInt8(ascii: "{")) else { return nil }
                sawParams = true
                if !consume(UInt8(ascii: "}")) {
                    while true {
                        guard let member = simpleString(), consume(UInt8(ascii: ":")) else { return nil }
                        if equals(member, "key") {
                            guard key == nil, let value = simpleString() else { return nil }
                            key = value
                        } else if equals(member, "default") {
                            guard fallback == nil, let value = boolean() else { return nil }
                            fallback = value
                        } else {
                            return nil
                        }
                        guard let more = memberSeparator() else { return nil }
                        if !more { break }
                    }
                }
            } else {
                return nil
            }
            guard let more = memberSeparator() else { return nil }
            if !more { break }
        }
        skipWhitespace()
        guard i == end, sawVersion, let id, let method, let key else { return nil }
        if equals(method, "isEnabled") {
            guard let fallback else { return nil }
            return RPCFastPath.Request(id: id, method: .isEnabled(default: fallback), key: string(key))
        }
        if equals(method, "get") {
            guard fallback == nil else { return nil }  // unknown parameter: the general path says so
            return RPCFastPath.Request(id: id, method: .get, key: string(key))
        }
        return nil
    }
}
