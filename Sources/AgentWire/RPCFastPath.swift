import AgentCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The hot path of the socket API (ISSUE 3 "Speed"): `isEnabled` and `get` requests of
/// the ordinary shape, scanned straight from the line's bytes without building a JSON
/// tree, and their answers written straight into a byte buffer.
///
/// It only ever *recognizes*: a line it does not fully understand — any other method or
/// member, an escape or a non-ASCII byte in a string, a fractional or huge id, a
/// duplicate member, anything after the object — gives nil, and the caller takes the
/// general path (`RPCMessage.parse`), which decides what the line means and which error
/// it gets. For every line it accepts, the request is the one `RPCMessage.parse` yields
/// and the answer bytes are the ones `RPCEncoder.line` writes for the same result.
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

    // MARK: - Answers

    /// Appends the answer line (with its `\n`) to an `isEnabled` request.
    public static func writeIsEnabled(id: RPCID, enabled: Bool, provenance: Provenance, into w: inout JSONWriter) {
        // The usual answer (a number id, an age in milliseconds, no error code) is put together
        // on the stack and appended once; the rest is written piece by piece below, the same bytes.
        if case .number(let n) = id, provenance.errorCode == nil {
            let done = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 192) { buffer -> Bool in
                var sink = ByteSink(base: buffer.baseAddress!, capacity: buffer.count)
                guard sink.isEnabledAnswer(id: n, enabled: enabled, provenance: provenance) else { return false }
                w.bytes.append(contentsOf: UnsafeBufferPointer(start: buffer.baseAddress, count: sink.count))
                return true
            }
            if done { return }
        }
        writeHead(id: id, into: &w)
        writeAge(provenance, into: &w)
        w.writeStatic(enabled ? #","enabled":true"# : #","enabled":false"#)
        writeTail(provenance, into: &w)
    }

    /// Appends the answer line (with its `\n`) to a `get` request.
    public static func writeGet(id: RPCID, flag: FeatureFlag?, provenance: Provenance, into w: inout JSONWriter) {
        writeHead(id: id, into: &w)
        writeAge(provenance, into: &w)
        if let code = provenance.errorCode {
            w.writeStatic(#","errorCode":"#)
            w.writeString(code.rawValue)
        }
        if let flag {
            // Keys in sorted order, as `JSONWriter.write(.object)` puts them.
            w.writeStatic(flag.isEnabled ? #","flag":{"isEnabled":true,"key":"# : #","flag":{"isEnabled":false,"key":"#)
            w.writeString(flag.key)
            w.writeStatic(#","properties":"#)
            w.write(.object(flag.properties))
            w.writeStatic(#","ruleId":"#)
            w.writeString(flag.ruleId)
            w.bytes.append(UInt8(ascii: "}"))
        } else {
            w.writeStatic(#","flag":null"#)
        }
        writeReasonAndSource(provenance, into: &w)
    }

    private static func writeHead(id: RPCID, into w: inout JSONWriter) {
        w.writeStatic(#"{"jsonrpc":"2.0","id":"#)
        switch id {
        case .number(let n): w.writeNumber(n)
        case .string(let s): w.writeString(s)
        case .null: w.writeStatic("null")
        }
        w.writeStatic(#","result":{"ageSeconds":"#)
    }

    /// `ageSeconds` as the general path rounds it (milliseconds) and writes it.
    private static func writeAge(_ p: Provenance, into w: inout JSONWriter) {
        if let age = p.ageSeconds {
            writeMilliseconds((age * 1000).rounded() / 1000, into: &w)
        } else {
            w.writeStatic("null")
        }
    }

    /// `value` (a whole number of milliseconds, in seconds) in the bytes `writeNumber`
    /// gives, without going through `description` (`ByteSink.milliseconds`, which the
    /// stack-built `isEnabled` answer uses too); any other number through `writeNumber`.
    static func writeMilliseconds(_ value: Double, into w: inout JSONWriter) {
        let written = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { buffer -> Bool in
            var sink = ByteSink(base: buffer.baseAddress!, capacity: buffer.count)
            guard sink.milliseconds(value) else { return false }
            w.bytes.append(contentsOf: UnsafeBufferPointer(start: buffer.baseAddress, count: sink.count))
            return true
        }
        if !written { w.writeNumber(value) }
    }

    /// `errorCode` (isEnabled only: it sorts after `enabled`), `reason`, `source`, the end.
    private static func writeTail(_ p: Provenance, into w: inout JSONWriter) {
        if let code = p.errorCode {
            w.writeStatic(#","errorCode":"#)
            w.writeString(code.rawValue)
        }
        writeReasonAndSource(p, into: &w)
    }

    /// `,"reason":…,"source":…}}\n`: the enum values are plain ASCII, written as is.
    private static func writeReasonAndSource(_ p: Provenance, into w: inout JSONWriter) {
        switch p.reason {
        case .targetingMatch: w.writeStatic(#","reason":"TARGETING_MATCH","source":""#)
        case .default: w.writeStatic(#","reason":"DEFAULT","source":""#)
        case .disabled: w.writeStatic(#","reason":"DISABLED","source":""#)
        case .error: w.writeStatic(#","reason":"ERROR","source":""#)
        }
        switch p.source {
        case .network: w.writeStatic(#"network"}}"#)
        case .cache: w.writeStatic(#"cache"}}"#)
        case .none: w.writeStatic(#"none"}}"#)
        }
        w.bytes.append(0x0A)
    }
}

/// A fixed buffer that the usual `isEnabled` answer is put together in: each `put` is false
/// (and the answer is then written by `JSONWriter` instead) when it does not fit or when the
/// bytes would need a form this does not write (`Double.description`).
private struct ByteSink {
    let base: UnsafeMutablePointer<UInt8>
    let capacity: Int
    var count = 0

    @inline(__always)
    mutating func put(_ text: StaticString) -> Bool {
        let n = text.utf8CodeUnitCount
        guard capacity &- count >= n else { return false }
        (base + count).update(from: text.utf8Start, count: n)
        count &+= n
        return true
    }

    @inline(__always)
    mutating func put(_ byte: UInt8) -> Bool {
        guard count < capacity else { return false }
        base[count] = byte
        count &+= 1
        return true
    }

    /// `JSONWriter.writeInteger`'s bytes.
    mutating func integer(_ i: Int64) -> Bool {
        if i < 0, !put(UInt8(ascii: "-")) { return false }
        var magnitude = i.magnitude
        var digits = 1
        var probe = magnitude
        while probe >= 10 {
            probe /= 10
            digits &+= 1
        }
        guard capacity &- count >= digits else { return false }
        var at = count &+ digits
        repeat {
            at &-= 1
            base[at] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
            magnitude /= 10
        } while magnitude > 0
        count &+= digits
        return true
    }

    /// `JSONWriter.writeNumber`'s bytes for a finite whole number below 2^53 and for a
    /// non-finite one; false for the rest (written with `description`).
    mutating func number(_ n: Double) -> Bool {
        guard n.isFinite else { return put("null") }
        guard n.magnitude < 9_007_199_254_740_992, let i = Int64(exactly: n) else { return false }
        return integer(i)
    }

    /// `value` (a whole number of milliseconds, in seconds) in the bytes `JSONWriter.writeNumber`
    /// gives (Swift's shortest round-trip form): a number of at most three decimals is its own
    /// shortest form, `0.001` to `1e15` are written without an exponent, and trailing zeros
    /// are dropped. Below 1e12 s a whole number of milliseconds is exact in an Int64 (no fmod).
    /// False when it does not fit or needs `description`.
    mutating func milliseconds(_ value: Double) -> Bool {
        let millis = (value * 1000).rounded()
        guard value > 0, value < 1e12, millis / 1000 == value, Int64(millis) % 1000 != 0 else { return number(value) }
        guard integer(Int64(millis) / 1000), put(UInt8(ascii: ".")) else { return false }
        var fraction = Int(Int64(millis) % 1000)
        var digits = 3
        while fraction % 10 == 0 {
            fraction /= 10
            digits -= 1
        }
        var divisor = 1
        for _ in 1..<digits { divisor *= 10 }
        while divisor > 0 {
            guard put(UInt8(ascii: "0") &+ UInt8(fraction / divisor % 10)) else { return false }
            divisor /= 10
        }
        return true
    }

    /// `writeIsEnabled`'s bytes for a number id and no error code.
    mutating func isEnabledAnswer(id: Double, enabled: Bool, provenance p: Provenance) -> Bool {
        guard put(#"{"jsonrpc":"2.0","id":"#), number(id), put(#","result":{"ageSeconds":"#) else { return false }
        if let age = p.ageSeconds {
            guard milliseconds((age * 1000).rounded() / 1000) else { return false }
        } else {
            guard put("null") else { return false }
        }
        guard put(enabled ? #","enabled":true"# : #","enabled":false"#) else { return false }
        let reason: Bool
        switch p.reason {
        case .targetingMatch: reason = put(#","reason":"TARGETING_MATCH","source":""#)
        case .default: reason = put(#","reason":"DEFAULT","source":""#)
        case .disabled: reason = put(#","reason":"DISABLED","source":""#)
        case .error: reason = put(#","reason":"ERROR","source":""#)
        }
        guard reason else { return false }
        switch p.source {
        case .network: guard put(#"network"}}"#) else { return false }
        case .cache: guard put(#"cache"}}"#) else { return false }
        case .none: guard put(#"none"}}"#) else { return false }
        }
        return put(0x0A)
    }
}

extension JSONWriter {
    /// Appends a literal that needs no escaping (no String in between).
    @inline(__always)
    mutating func writeStatic(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
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
