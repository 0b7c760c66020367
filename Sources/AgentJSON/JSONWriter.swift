

/// A hand-written JSON serializer into a byte buffer: the answer path of the
/// socket API, where `JSONEncoder` would cost more than the whole request.
///
/// - Strings: `"` and `\` escaped, `\n` `\r` `\t` `\b` `\f` as their short
///   escapes, other control characters as `\u00XX`; non-ASCII UTF-8 is kept
///   as is; `/` is not escaped.
/// - Numbers: integral values up to 2^53 without a fraction (`5`), others in
///   Swift's shortest round-trip form (`0.1`, `1e-07`, `1e+20`); NaN and
///   infinities, which JSON cannot carry, are written as `null`.
/// - Object keys in sorted order, so equal values give equal bytes.
public struct JSONWriter: Sendable {
    public var bytes: [UInt8]

    public init(capacity: Int = 128) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// The encoding of `value`.
    public static func encode(_ value: JSONValue) -> [UInt8] {
        var writer = JSONWriter()
        writer.write(value)
        return writer.bytes
    }

    /// The encoding of `value` as a String (for logs, tests and the CLI).
    public static func string(_ value: JSONValue) -> String {
        String(decoding: encode(value), as: UTF8.self)
    }

    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: writeASCII("null")
        case .bool(let b): writeASCII(b ? "true" : "false")
        case .number(let n): writeNumber(n)
        case .string(let s): writeString(s)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            var first = true
            for element in elements {
                if !first { bytes.append(UInt8(ascii: ",")) }
                first = false
                write(element)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            switch members.count {
            case 0: break
            case 1:
                let (k, v) = members.first!
                writeString(k)
                bytes.append(UInt8(ascii: ":"))
                write(v)
            default:
                var first = true
                for key in members.keys.sorted() {
                    if !first { bytes.append(UInt8(ascii: ",")) }
                    first = false
                    writeString(key)
                    bytes.append(UInt8(ascii: ":"))
                    write(members[key]!)
                }
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    public mutating func writeNumber(_ n: Double) {
        guard n.isFinite else { return writeASCII("null") }
        if n.magnitude < 9_007_199_254_740_992, let i = Int64(exactly: n) {
            writeInteger(i)
        } else {
            writeASCII(n.description)
        }
    }

    public mutating func writeInteger(_ i: Int64) {
        if i >= 0 && i < 10 {
            bytes.append(UInt8(ascii: "0") &+ UInt8(i))
            return
        }
        // The digits of String(i), without making the String (an answer's hot path).
        if i < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = i.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits
        withUnsafeMutableBytes(of: &digits) { raw in
            var start = raw.count
            repeat {
                start -= 1
                raw[start] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[start...]))
        }
    }

    /// Writes text that needs no escaping (ASCII punctuation, digits, names).
    public mutating func writeASCII(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    /// Writes already-encoded JSON as is (the caller vouches for it).
    public mutating func writeRaw(_ json: some Sequence<UInt8>) {
        bytes.append(contentsOf: json)
    }

    public mutating func writeString(_ s: String) {
        bytes.append(UInt8(ascii: "\""))
        let done: Void? = s.utf8.withContiguousStorageIfAvailable { utf8 in
            appendEscaped(utf8)
        }
        if done == nil {
            let copy = Array(s.utf8)
            copy.withUnsafeBufferPointer { appendEscaped($0) }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func appendEscaped(_ utf8: UnsafeBufferPointer<UInt8>) {
        var runStart = 0
        var i = 0
        let n = utf8.count
        while i < n {
            let c = utf8[i]
            if c >= 0x20 && c != 0x22 && c != 0x5C {
                i += 1
                continue
            }
            if runStart < i {
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<i]))
            }
            bytes.append(UInt8(ascii: "\\"))
            switch c {
            case 0x22: bytes.append(UInt8(ascii: "\""))
            case 0x5C: bytes.append(UInt8(ascii: "\\"))
            case 0x0A: bytes.append(UInt8(ascii: "n"))
            case 0x0D: bytes.append(UInt8(ascii: "r"))
            case 0x09: bytes.append(UInt8(ascii: "t"))
            case 0x08: bytes.append(UInt8(ascii: "b"))
            case 0x0C: bytes.append(UInt8(ascii: "f"))
            default:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                          hex[Int(c >> 4)], hex[Int(c & 0xF)]])
            }
            i += 1
            runStart = i
        }
        if runStart < n {
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<n]))
        }
    }
}
