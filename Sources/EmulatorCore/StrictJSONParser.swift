import AgentCore

/// Where a JSON text or a definition is wrong: a path such as
/// `flags[2].rules[0].when.rolloutPercent` and what is wrong there.
public struct DefinitionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Path components from the root, e.g. `["flags", 2, "key"]`, rendered by `path`.
    public var components: [PathComponent]
    public var message: String

    public enum PathComponent: Sendable, Equatable {
        case key(String)
        case index(Int)
    }

    public init(_ components: [PathComponent] = [], _ message: String) {
        self.components = components
        self.message = message
    }

    /// `flags[2].rules[0].when` (empty for the root).
    public var path: String {
        var out = ""
        for c in components {
            switch c {
            case .key(let k): out += out.isEmpty ? k : "." + k
            case .index(let i): out += "[\(i)]"
            }
        }
        return out
    }

    public var description: String { path.isEmpty ? message : "\(path): \(message)" }

    /// The same error seen from one level up.
    func prefixed(_ c: PathComponent) -> DefinitionError {
        var e = self
        e.components.insert(c, at: 0)
        return e
    }
}

/// A strict JSON parser (RFC 8259) that produces `JSONValue` and, unlike
/// `JSONDecoder`, rejects duplicate keys inside one object, naming the path.
/// Numbers become `Double`; `true`/`false` are never numbers.
public enum StrictJSONParser {
    public static let maxDepth = 256

    public static func parse(_ text: String) throws(DefinitionError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    public static func parse(_ bytes: [UInt8]) throws(DefinitionError) -> JSONValue {
        let result: Result<JSONValue, DefinitionError> = bytes.withUnsafeBufferPointer { buf in
            var p = Parser(buf: buf)
            do throws(DefinitionError) {
                p.skipSpace()
                let v = try p.value(depth: 0)
                p.skipSpace()
                if p.i != buf.count { throw p.error("unexpected data after the JSON value") }
                return .success(v)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    private struct Parser {
        let buf: UnsafeBufferPointer<UInt8>
        var i = 0

        init(buf: UnsafeBufferPointer<UInt8>) { self.buf = buf }

        func error(_ message: String) -> DefinitionError {
            DefinitionError([], "invalid JSON at byte \(i): \(message)")
        }

        mutating func skipSpace() {
            while i < buf.count {
                switch buf[i] {
                case 0x20, 0x09, 0x0A, 0x0D: i += 1
                default: return
                }
            }
        }

        mutating func value(depth: Int) throws(DefinitionError) -> JSONValue {
            guard i < buf.count else { throw error("unexpected end of input") }
            switch buf[i] {
            case UInt8(ascii: "{"): return try object(depth: depth + 1)
            case UInt8(ascii: "["): return try array(depth: depth + 1)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try literal("true"); return .bool(true)
            case UInt8(ascii: "f"): try literal("false"); return .bool(false)
            case UInt8(ascii: "n"): try literal("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
            default: throw error("unexpected character")
            }
        }

        mutating func literal(_ word: StaticString) throws(DefinitionError) {
            let n = word.utf8CodeUnitCount
            guard i + n <= buf.count else { throw error("unexpected end of input") }
            let w = word.utf8Start
            for k in 0..<n where buf[i + k] != w[k] { throw error("unexpected character") }
            i += n
        }

        mutating func object(depth: Int) throws(DefinitionError) -> JSONValue {
            if depth > StrictJSONParser.maxDepth { throw error("nested too deeply") }
            i += 1
            var members: [String: JSONValue] = [:]
            skipSpace()
            if i < buf.count, buf[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
            while true {
                skipSpace()
                guard i < buf.count, buf[i] == UInt8(ascii: "\"") else { throw error("expected a string key") }
                let key = try string()
                skipSpace()
                guard i < buf.count, buf[i] == UInt8(ascii: ":") else { throw error("expected ':'") }
                i += 1
                skipSpace()
                let v: JSONValue
                do { v = try value(depth: depth) } catch { throw error.prefixed(.key(key)) }
                if members.updateValue(v, forKey: key) != nil {
                    throw DefinitionError([], "duplicate key \"\(key)\"")
                }
                skipSpace()
                guard i < buf.count else { throw error("unexpected end of input") }
                if buf[i] == UInt8(ascii: ",") { i += 1; continue }
                if buf[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
                throw error("expected ',' or '}'")
            }
        }

        mutating func array(depth: Int) throws(DefinitionError) -> JSONValue {
            if depth > StrictJSONParser.maxDepth { throw error("nested too deeply") }
            i += 1
            var items: [JSONValue] = []
            skipSpace()
            if i < buf.count, buf[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
            while true {
                skipSpace()
                do { items.append(try value(depth: depth)) } catch { throw error.prefixed(.index(items.count)) }
                skipSpace()
                guard i < buf.count else { throw error("unexpected end of input") }
                if buf[i] == UInt8(ascii: ",") { i += 1; continue }
                if buf[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
                throw error("expected ',' or ']'")
            }
        }

        mutating func number() throws(DefinitionError) -> Double {
            let start = i
            if buf[i] == UInt8(ascii: "-") { i += 1 }
            guard i < buf.count, isDigit(buf[i]) else { throw error("invalid number") }
            if buf[i] == UInt8(ascii: "0") {
                i += 1
                if i < buf.count, isDigit(buf[i]) { throw error("invalid number (leading zero)") }
            } else {
                while i < buf.count, isDigit(buf[i]) { i += 1 }
            }
            if i < buf.count, buf[i] == UInt8(ascii: ".") {
                i += 1
                guard i < buf.count, isDigit(buf[i]) else { throw error("invalid number") }
                while i < buf.count, isDigit(buf[i]) { i += 1 }
            }
            if i < buf.count, buf[i] == UInt8(ascii: "e") || buf[i] == UInt8(ascii: "E") {
                i += 1
                if i < buf.count, buf[i] == UInt8(ascii: "+") || buf[i] == UInt8(ascii: "-") { i += 1 }
                guard i < buf.count, isDigit(buf[i]) else { throw error("invalid number") }
                while i < buf.count, isDigit(buf[i]) { i += 1 }
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: buf[start..<i]), as: UTF8.self)
            guard let d = Double(text), d.isFinite else { throw error("number out of range") }
            return d
        }

        func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

        mutating func string() throws(DefinitionError) -> String {
            i += 1  // opening quote
            let start = i
            // Fast path: no escapes.
            while i < buf.count {
                let b = buf[i]
                if b == UInt8(ascii: "\"") {
                    let raw = UnsafeBufferPointer(rebasing: buf[start..<i])
                    i += 1
                    guard let s = String(validating: raw, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
                    return s
                }
                if b == UInt8(ascii: "\\") { break }
                if b < 0x20 { throw error("control character in string") }
                i += 1
            }
            var bytes = Array(UnsafeBufferPointer(rebasing: buf[start..<i]))
            while i < buf.count {
                let b = buf[i]
                if b == UInt8(ascii: "\"") {
                    i += 1
                    guard let s = String(validating: bytes, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
                    return s
                }
                if b < 0x20 { throw error("control character in string") }
                if b != UInt8(ascii: "\\") { bytes.append(b); i += 1; continue }
                i += 1
                guard i < buf.count else { break }
                let e = buf[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""): bytes.append(0x22)
                case UInt8(ascii: "\\"): bytes.append(0x5C)
                case UInt8(ascii: "/"): bytes.append(0x2F)
                case UInt8(ascii: "b"): bytes.append(0x08)
                case UInt8(ascii: "f"): bytes.append(0x0C)
                case UInt8(ascii: "n"): bytes.append(0x0A)
                case UInt8(ascii: "r"): bytes.append(0x0D)
                case UInt8(ascii: "t"): bytes.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard i + 1 < buf.count, buf[i] == UInt8(ascii: "\\"), buf[i + 1] == UInt8(ascii: "u")
                        else { throw error("unpaired surrogate") }
                        i += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw error("unpaired surrogate")
                    }
                    guard let u = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                    bytes.append(contentsOf: UTF8.encode(u)!)
                default: throw error("invalid escape")
                }
            }
            throw error("unterminated string")
        }

        mutating func hex4() throws(DefinitionError) -> UInt32 {
            guard i + 4 <= buf.count else { throw error("invalid \\u escape") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let b = buf[i]
                let d: UInt8
                switch b {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): d = b - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): d = b - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): d = b - UInt8(ascii: "A") + 10
                default: throw error("invalid \\u escape")
                }
                v = v << 4 | UInt32(d)
                i += 1
            }
            return v
        }
    }
}
