import AgentCore

/// The text of number ids as a client wrote them (JSON-RPC ids are echoed byte for byte:
/// `9007199254740993` is not a Double). Run on a line `JSONReader` has accepted, so it
/// only skims: strings, nesting and the top-level objects' `id` members; a key is compared
/// after its escapes are read (`"\u0069d"` is `id`), and the last `id` wins, as in the tree.
enum IDLiterals {
    /// The number `id` of a line holding one object; nil when it has none.
    static func single(_ line: UnsafeRawBufferPointer) -> String? {
        var s = Skim(line)
        s.whitespace()
        return s.peek == UInt8(ascii: "{") ? s.objectID() : nil
    }

    /// Per element of a batch line: its number `id`, or nil.
    static func batch(_ line: UnsafeRawBufferPointer, count: Int) -> [String?] {
        var out: [String?] = []
        var s = Skim(line)
        s.whitespace()
        guard s.take(UInt8(ascii: "[")) else { return Array(repeating: nil, count: count) }
        while out.count < count {
            s.whitespace()
            if s.peek == UInt8(ascii: "{") { out.append(s.objectID()) } else { s.value(); out.append(nil) }
            s.whitespace()
            _ = s.take(UInt8(ascii: ","))
        }
        return out
    }
}

private struct Skim {
    let bytes: UnsafeRawBufferPointer
    var i = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var peek: UInt8? { i < bytes.count ? bytes[i] : nil }

    mutating func take(_ byte: UInt8) -> Bool {
        guard peek == byte else { return false }
        i += 1
        return true
    }

    mutating func whitespace() {
        while let c = peek, c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 { i += 1 }
    }

    /// At `{`: the object's number `id` (last wins), the object skipped.
    mutating func objectID() -> String? {
        i += 1
        var id: String?
        while true {
            whitespace()
            guard peek == UInt8(ascii: "\"") else { _ = take(UInt8(ascii: "}")); return id }
            let keyStart = i
            string()
            let key = bytes[keyStart..<i]
            whitespace()
            _ = take(UInt8(ascii: ":"))
            whitespace()
            let valueStart = i
            value()
            if Self.isID(key) {
                let first = bytes[valueStart]
                id = first == UInt8(ascii: "-") || (first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9"))
                    ? String(decoding: bytes[valueStart..<i], as: UTF8.self) : nil
            }
            whitespace()
            if !take(UInt8(ascii: ",")) {
                _ = take(UInt8(ascii: "}"))
                return id
            }
        }
    }

    private static func isID(_ key: Slice<UnsafeRawBufferPointer>) -> Bool {
        if key.count == 4 { return key.elementsEqual("\"id\"".utf8) }
        guard key.contains(UInt8(ascii: "\\")) else { return false }
        return (try? JSONReader.parse(UnsafeRawBufferPointer(rebasing: key))) == .string("id")
    }

    /// At `"`: past the closing quote.
    mutating func string() {
        i += 1
        while let c = peek {
            i += 1
            if c == UInt8(ascii: "\\") { i += 1 } else if c == UInt8(ascii: "\"") { return }
        }
    }

    /// Past one value (valid JSON assumed).
    mutating func value() {
        guard let c = peek else { return }
        switch c {
        case UInt8(ascii: "\""):
            string()
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            while let b = peek {
                if b == UInt8(ascii: "\"") { string(); continue }
                i += 1
                if b == UInt8(ascii: "{") || b == UInt8(ascii: "[") { depth += 1 }
                if b == UInt8(ascii: "}") || b == UInt8(ascii: "]") {
                    depth -= 1
                    if depth == 0 { return }
                }
            }
        default:
            while let b = peek, b != UInt8(ascii: ","), b != UInt8(ascii: "}"), b != UInt8(ascii: "]"),
                  b != 0x20, b != 0x0A, b != 0x0D, b != 0x09 { i += 1 }
        }
    }
}
