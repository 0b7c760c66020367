/// A streaming reader over one JSON document, for a caller that knows the shape it expects:
/// it walks objects member by member and reads each value as the kind it wants, without a
/// `JSONValue` tree for the parts whose shape is known (the stored state, 1,000 flags of it
/// read before READY=1: docs/performance.md). Anything else is read as a `JSONValue`.
///
/// It is `JSONReader`'s parser (same code, same errors at the same offsets): every byte is
/// checked as `JSONReader.parse` checks it, a value skipped included, the nesting limit
/// applies, and only whitespace may follow the value. A read of one kind (`readString`,
/// `readBool`, `readNumber`, `readNull`, `readObject`) consumes nothing when the next value
/// is of another kind (or is no value at all): the caller tries another kind, or leaves it to
/// `readObject`, which skips a member's value its callback did not read. A duplicate key is
/// the caller's to settle: JSONReader's default, the last one wins, is the caller assigning
/// each member as it comes.
public struct JSONCursor {
    var parser: Parser

    /// The kinds of JSON value.
    public enum Kind: Sendable, Equatable {
        case object, array, string, number, bool, null
    }

    /// Runs `body` on a cursor at the start of `bytes`; `body` reads one value. Then only
    /// whitespace may follow (as `JSONReader.parse`).
    public static func read<R>(
        _ bytes: UnsafeRawBufferPointer, _ body: (inout JSONCursor) throws(JSONParseError) -> R
    ) throws(JSONParseError) -> R {
        var cursor = JSONCursor(parser: try Parser(bytes))
        let result = try body(&cursor)
        try cursor.parser.end()
        return result
    }

    public static func read<R>(
        _ bytes: [UInt8], _ body: (inout JSONCursor) throws(JSONParseError) -> R
    ) throws(JSONParseError) -> R {
        try withUnsafeBytesTyped(bytes) { (raw) throws(JSONParseError) in try read(raw, body) }
    }

    /// The byte offset of the next value (or of what follows the last one read).
    public var offset: Int { parser.i }

    /// The kind of the next value; nil at the end of the input or before a byte no value starts with.
    public mutating func peek() -> Kind? {
        parser.skipWhitespace()
        guard parser.i < parser.count else { return nil }
        switch parser.p[parser.i] {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number
        default: return nil
        }
    }

    /// The next value when it is a string; nil, nothing read, when it is not.
    public mutating func readString() throws(JSONParseError) -> String? {
        guard peek() == .string else { return nil }
        return try parser.parseString()
    }

    /// The next value when it is `true` or `false`; nil, nothing read, when it is not.
    public mutating func readBool() throws(JSONParseError) -> Bool? {
        guard peek() == .bool else { return nil }
        if parser.p[parser.i] == UInt8(ascii: "t") {
            try parser.literal("true")
            return true
        }
        try parser.literal("false")
        return false
    }

    /// The next value when it is a number; nil, nothing read, when it is not.
    public mutating func readNumber() throws(JSONParseError) -> Double? {
        guard peek() == .number else { return nil }
        return try parser.parseNumber()
    }

    /// Reads the next value when it is `null` (true); false, nothing read, when it is not.
    public mutating func readNull() throws(JSONParseError) -> Bool {
        guard peek() == .null else { return false }
        try parser.literal("null")
        return true
    }

    /// The next value, whatever its kind (an object's duplicate keys: the last one wins).
    public mutating func readValue() throws(JSONParseError) -> JSONValue {
        try parser.parseValue()
    }

    /// Reads past the next value, checking it as `readValue` does (a string is not made).
    public mutating func skipValue() throws(JSONParseError) {
        if peek() == .string {
            _ = try parser.parseStringToken()
        } else {
            _ = try parser.parseValue()
        }
    }

    /// When the next value is an object, reads it: `member` is called for each member in
    /// order, the cursor before its value, and may read that value (a value it leaves unread
    /// is skipped). False, nothing read, when the next value is not an object.
    public mutating func readObject(
        _ member: (inout JSONCursor, JSONKey) throws(JSONParseError) -> Void
    ) throws(JSONParseError) -> Bool {
        guard peek() == .object else { return false }
        guard try parser.beginObject() else { return true }
        repeat {
            let key = JSONKey(token: try parser.memberKey())
            parser.skipWhitespace()
            let start = parser.i
            try member(&self, key)
            if parser.i == start { try skipValue() }  // every value is at least one byte
        } while try parser.nextMember()
        return true
    }
}

/// An object member's key, read by `JSONCursor.readObject`: compared with a known name as
/// bytes when it is plain ASCII (no `String` made, nothing hashed; inlined where it is
/// compared, so a name's length and bytes are constants there). Valid only during the
/// callback it is passed to (it points into the input).
public struct JSONKey {
    /// The key's bytes when they are plain ASCII (no escape); nil when `decoded` holds it.
    @usableFromInline let ascii: UnsafeBufferPointer<UInt8>?
    @usableFromInline let decoded: String?

    init(token: StringToken) {
        switch token {
        case .ascii(let run): (ascii, decoded) = (run, nil)
        case .decoded(let s): (ascii, decoded) = (nil, s)
        }
    }

    /// The key as a String (escapes decoded).
    public var string: String { ascii.map { StringToken.ascii($0).string } ?? decoded ?? "" }

    /// Whether the key equals `name` as Swift strings do (as a `[String: JSONValue]` lookup
    /// would find it): `"a"` and `"\u0061"` are one key.
    @inlinable @inline(__always)
    public static func == (key: JSONKey, name: StaticString) -> Bool {
        guard let run = key.ascii, name.hasPointerRepresentation, name.isASCII else { return key.equalsAsString(name) }
        let n = name.utf8CodeUnitCount
        guard run.count == n else { return false }
        let expected = name.utf8Start
        for k in 0..<n where run[k] != expected[k] { return false }
        return true
    }

    /// Escapes or non-ASCII bytes: Swift's equality (canonical equivalence: U+212A KELVIN SIGN is "K").
    @usableFromInline
    func equalsAsString(_ name: StaticString) -> Bool { string == name.description }

    @inlinable
    public static func != (key: JSONKey, name: StaticString) -> Bool { !(key == name) }

    /// `switch key { case "hwid": … }`: the same comparison as `==`.
    @inlinable @inline(__always)
    public static func ~= (name: StaticString, key: JSONKey) -> Bool { key == name }
}
