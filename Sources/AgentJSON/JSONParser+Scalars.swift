/// A string as read: the bytes between its quotes when they are plain ASCII (no escape, no
/// byte over 0x7F: no `String` made), or the decoded text.
enum StringToken {
    case ascii(UnsafeBufferPointer<UInt8>)
    case decoded(String)

    var string: String {
        switch self {
        case .ascii(let run) where run.count <= 15:
            // A small string (kept inline, no allocation), made without validating again what is ASCII.
            String(unsafeUninitializedCapacity: run.count) { buffer in
                guard let to = buffer.baseAddress, let from = run.baseAddress else { return 0 }
                to.update(from: from, count: run.count)
                return run.count
            }
        case .ascii(let run): String(decoding: run, as: UTF8.self)
        case .decoded(let s): s
        }
    }
}

// Strings, numbers and literals: the scalars both `JSONReader` and `JSONCursor` read.
extension Parser {
    @inline(__always)
    mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let n = word.utf8CodeUnitCount
        guard count - i >= n, memcmpEqual(p + i, word.utf8Start, n) else { throw fail("invalid literal") }
        i += n
    }

    @inline(__always)
    private func memcmpEqual(_ a: UnsafePointer<UInt8>, _ b: UnsafePointer<UInt8>, _ n: Int) -> Bool {
        for k in 0..<n where a[k] != b[k] { return false }
        return true
    }

    /// At the opening quote; leaves `i` after the closing quote.
    mutating func parseString() throws(JSONParseError) -> String {
        try parseStringToken().string
    }

    /// At the opening quote; leaves `i` after the closing quote.
    mutating func parseStringToken() throws(JSONParseError) -> StringToken {
        let open = i
        let start = i + 1
        var j = start  // a local index: the loop below keeps it in a register
        var ascii = true
        // Fast path: no escapes. Eight bytes a step to the first that is a quote, a backslash, a
        // control character or non-ASCII; byte by byte in the last seven.
        while j < count {
            if count - j >= 8 {
                let special = Self.specialBytes(UInt64(littleEndian: UnsafeRawPointer(p + j).loadUnaligned(as: UInt64.self)))
                if special == 0 {
                    j += 8
                    continue
                }
                j += special.trailingZeroBitCount &>> 3  // the first special byte
            }
            let c = p[j]
            if c == UInt8(ascii: "\"") {
                let run = UnsafeBufferPointer(start: p + start, count: j - start)
                i = j + 1
                if ascii { return .ascii(run) }
                guard let s = String(validating: run, as: UTF8.self) else {
                    throw fail("invalid UTF-8 in a string", at: start)
                }
                return .decoded(s)
            }
            if c == UInt8(ascii: "\\") || c < 0x20 { break }
            if c >= 0x80 { ascii = false }
            j += 1
        }
        i = j
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
        return .decoded(s)
    }

    /// The high bit of each byte of `word` (read little-endian: its first byte is the lowest) that
    /// is a quote, a backslash, below 0x20 or above 0x7F, or a higher byte's bit set by a borrow
    /// from one of those: so the lowest bit set, if any, is the first such byte's. (`(x - 0x01…)
    /// & ~x & 0x80…` marks a zero byte of x, `(x - 0x20…) & ~x & 0x80…` a byte below 0x20; a
    /// borrow only runs upward from a byte marked rightly.)
    @inline(__always)
    static func specialBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        let quote = word ^ (ones &* 0x22), backslash = word ^ (ones &* 0x5C)
        return (((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- ones &* 0x20) & ~word) | word) & highs
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
