import AgentJSON
import Foundation
import Testing

/// Reads a document member by member and element by element with a cursor, every scalar
/// through its typed read: the same value `JSONReader.parse` gives (objects: last key wins).
private func walk(_ c: inout JSONCursor) throws(JSONParseError) -> JSONValue {
    if let s = try c.readString() { return .string(s) }
    if let b = try c.readBool() { return .bool(b) }
    if let n = try c.readNumber() { return .number(n) }
    if try c.readNull() { return .null }
    var members: [String: JSONValue] = [:]
    if try c.readObject({ (c, key) throws(JSONParseError) in members[key.string] = try walk(&c) }) { return .object(members) }
    return try c.readValue()  // an array, or no value: the reader's error
}

private func outcome(_ body: () throws(JSONParseError) -> JSONValue) -> Result<JSONValue, JSONParseError> {
    do throws(JSONParseError) { return .success(try body()) } catch { return .failure(error) }
}

@Suite struct JSONCursorTests {
    static let documents = JSONReaderTests.valid + JSONReaderTests.invalid + [
        #"{"a":1,"a":{"b":[1,{"c":null}]},"\u0061":true}"#, #"{"k":"v" , "n" :-0.5e3,"t":true,"f":false,"z":null}"#,
        #"{"a":{"b":{"c":{}}}}"#, #"{"a":}"#, #"{"a":1 "b":2}"#, #"{"a":1,"#, #"{"a":tru}"#, #"{"a":"\ud800"}"#, "{\"a\":\"\t\"}",
        #"{"a":[1,2,]}"#, #"{"a":1}}"#, "{} ", " {\"é\":\"ü\"} ",
    ]

    @Test("A cursor walking a document reads what JSONReader reads, and refuses what it refuses with the same error")
    func agreesWithJSONReader() {
        for text in Self.documents {
            let bytes = Array(text.utf8)
            let walked = outcome { () throws(JSONParseError) in try JSONCursor.read(bytes) { (c) throws(JSONParseError) in try walk(&c) } }
            let skipped = outcome { () throws(JSONParseError) in try JSONCursor.read(bytes) { (c) throws(JSONParseError) in try c.skipValue(); return .null } }
            let parsed = outcome { () throws(JSONParseError) in try JSONReader.parse(bytes) }
            #expect(walked == parsed, "\(text)")
            #expect(skipped.map { _ in JSONValue.null } == parsed.map { _ in .null }, "\(text)")
        }
    }

    @Test("Nesting is limited as in JSONReader, objects read through the cursor included")
    func nestingLimit() throws {
        func nested(_ depth: Int) -> [UInt8] { Array((String(repeating: #"{"a":"#, count: depth) + "1" + String(repeating: "}", count: depth)).utf8) }
        let limit = JSONReader.maximumDepth
        #expect(try JSONCursor.read(nested(limit)) { (c) throws(JSONParseError) in try walk(&c) } == JSONReader.parse(nested(limit)))
        #expect(throws: JSONParseError(offset: 5 * limit, reason: "nesting deeper than \(limit)")) {
            try JSONCursor.read(nested(limit + 1)) { (c) throws(JSONParseError) in try walk(&c) }
        }
        #expect(throws: JSONParseError(offset: 5 * limit, reason: "nesting deeper than \(limit)")) { try JSONReader.parse(nested(limit + 1)) }
    }

    @Test("A typed read of another kind reads nothing; a member's value left unread is skipped")
    func typedReadsOfAnotherKind() throws {
        let seen = try JSONCursor.read(Array(#" {"s":"x","n":5,"b":true,"z":null,"o":{"i":[1]},"a":[2]} "#.utf8)) { (c) throws(JSONParseError) in
            var seen: [String] = []
            let isObject = try c.readObject { (c, key) throws(JSONParseError) in
                let start = c.offset
                #expect(try c.readString() == nil || key == "s")
                if key != "s" { #expect(c.offset == start) }
                #expect(try c.readBool() == nil || key == "b")
                #expect(try c.readNumber() == nil || key == "n")
                #expect(try c.readNull() == false || key == "z")
                seen.append(key.string)  // the rest (o, a, and what was not read) is skipped
            }
            #expect(isObject)
            return seen
        }
        #expect(seen == ["s", "n", "b", "z", "o", "a"])
        #expect(throws: JSONParseError(offset: 0, reason: "unexpected data after the JSON value")) {
            try JSONCursor.read(Array("[1]".utf8)) { (c) throws(JSONParseError) in _ = try c.readObject { _, _ in } }
        }
        #expect(throws: JSONParseError(offset: 0, reason: "empty input")) { try JSONCursor.read([]) { (c) throws(JSONParseError) in try c.skipValue() } }
        #expect(throws: JSONParseError(offset: 1, reason: "unexpected end of input")) {
            try JSONCursor.read(Array(" ".utf8)) { (c) throws(JSONParseError) in try c.skipValue() }
        }
    }

    @Test("Keys compare as Swift strings do: escapes decoded, canonical equivalents equal, NUL significant")
    func keyComparison() throws {
        func matches(_ keyText: String, _ name: StaticString) throws -> Bool {
            try JSONCursor.read(Array("{\"\(keyText)\":0}".utf8)) { (c) throws(JSONParseError) in
                var result = false
                _ = try c.readObject { (_, key) throws(JSONParseError) in result = key == name }
                return result
            }
        }
        #expect(try matches("hwid", "hwid"))
        #expect(try !matches("hwid", "hwi") && !matches("hwi", "hwid") && !matches("hwid", "HWID") && !matches("hwid", ""))
        #expect(try matches("", ""))
        #expect(try matches(#"h\u0077id"#, "hwid") && matches(#"\u0068wid"#, "hwid"))
        #expect(try !matches(#"hwid\u0000"#, "hwid"))
        #expect(try matches("\u{212A}", "K"))  // KELVIN SIGN is K as a Swift string (and as a dictionary key)
        #expect(try matches("e\u{301}", "é") && matches(#"\u00e9"#, "é") && matches("é", "e\u{301}"))
        let key: JSONValue = ["\u{212A}": 1]
        #expect(key["K"] == 1)  // what the tree's lookup did
        // `switch` on a key.
        let found = try JSONCursor.read(Array(#"{"b\u0061seURL":1,"other":2}"#.utf8)) { (c) throws(JSONParseError) in
            var found: [String] = []
            _ = try c.readObject { (_, key) throws(JSONParseError) in
                switch key {
                case "baseURL": found.append("baseURL")
                default: found.append("?" + key.string)
                }
            }
            return found
        }
        #expect(found == ["baseURL", "?other"])
    }

    @Test("Strings through the cursor: escapes, non-ASCII, invalid UTF-8 refused as JSONReader refuses it")
    func strings() throws {
        let text = #"["plain","é ключ 🚀","\u00e9\ud83d\ude80","q\"b\\s\/\b\f\n\r\t",""]"#
        #expect(try JSONCursor.read(Array(text.utf8)) { (c) throws(JSONParseError) in try c.readValue() } == JSONReader.parse(text))
        let bad: [UInt8] = [0x7B, 0x22, 0xC3, 0x22, 0x3A, 0x31, 0x7D]  // {"<bad UTF-8>":1}
        #expect(throws: JSONParseError(offset: 2, reason: "invalid UTF-8 in a string")) {
            try JSONCursor.read(bad) { (c) throws(JSONParseError) in _ = try c.readObject { _, _ in } }
        }
        #expect(throws: JSONParseError(offset: 2, reason: "invalid UTF-8 in a string")) { try JSONReader.parse(bad) }
    }
}

/// The string scan goes eight bytes a step and objects start from shared empty ones: strings
/// of every length with a special byte at every place, and objects of every size, read as
/// before (`JSONDecoder` agrees).
@Suite struct JSONReaderStepTests {
    @Test("Strings of every length to 40 with a quote, backslash, control character or non-ASCII at every place")
    func stringsWithASpecialByteAnywhere() throws {
        let specials: [(text: String, value: String?)] = [(#"\""#, "\""), (#"\\"#, "\\"), (#"\n"#, "\n"), (#"\u00e9"#, "é"),
                                                          ("é", "é"), ("🚀", "🚀"), ("\u{7F}", "\u{7F}"), ("\t", nil), ("\u{1F}", nil)]
        for length in 0...40 {
            for at in 0...length {
                for special in specials {
                    let text = String(repeating: "a", count: at) + special.text + String(repeating: "b", count: length - at)
                    for document in ["\"\(text)\"", "[\"\(text)\"]", "{\"\(text)\":\"\(text)\"}"] {
                        let parsed = try? JSONReader.parse(document)
                        guard let value = special.value else {
                            let offset = (document.hasPrefix("\"") ? 1 : 2) + at  // the control character
                            #expect(throws: JSONParseError(offset: offset, reason: "control character in a string")) { try JSONReader.parse(document) }
                            continue
                        }
                        let expected = String(repeating: "a", count: at) + value + String(repeating: "b", count: length - at)
                        let want: JSONValue = document.hasPrefix("{") ? [expected: .string(expected)] : document.hasPrefix("[") ? [.string(expected)] : .string(expected)
                        #expect(parsed == want, "\(document)")
                    }
                }
            }
        }
        // Unterminated, at every length: the error names the opening quote.
        for length in 0...20 {
            #expect(throws: JSONParseError(offset: 1, reason: "unterminated string")) { try JSONReader.parse("[\"" + String(repeating: "x", count: length)) }
        }
    }

    @Test("Objects of every size to 30 are their members, each its own dictionary")
    func objectsOfEverySize() throws {
        var previous: [JSONValue] = []
        for size in 0...30 {
            let members = (0..<size).map { (key: "k\($0)", value: JSONValue.number(Double($0))) }
            let text = "[" + (0..<3).map { _ in "{" + members.map { "\"\($0.key)\":\(Int($0.value.numberValue!))" }.joined(separator: ",") + "}" }.joined(separator: ",") + "]"
            let parsed = try JSONReader.parse(text)
            let object = JSONValue.object(Dictionary(uniqueKeysWithValues: members.map { ($0.key, $0.value) }))
            #expect(parsed == .array([object, object, object]))
            #expect(try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) == parsed)
            previous.append(parsed)
        }
        // Still intact once later objects (made from the same empty ones) were filled.
        for (size, value) in previous.enumerated() { #expect(value.arrayValue?.first?.objectValue?.count == size) }
    }
}
