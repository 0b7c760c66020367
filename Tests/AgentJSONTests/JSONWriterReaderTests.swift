import Foundation
import Testing
@testable import AgentJSON

private func decodeWithFoundation(_ bytes: [UInt8]) throws -> JSONValue {
    try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
}

/// Values that cover every kind, escapes, non-ASCII text and number shapes.
private let samples: [JSONValue] = [
    .null, true, false, 0, 5, -5, 1.5, -0.25, 0.1, 1e-7, 1e20, 123456789012345,
    9007199254740993, 2.5e-300, 1.7976931348623157e308,
    "", "plain", "quote \" backslash \\ slash /", "tab\tnewline\ncr\rbell\u{07}nul\u{00}esc\u{1B}",
    "é ключ → 🚀 \u{2028}", "\u{7F}\u{80}\u{FFFF}",
    [], [1, "a", nil, true, [false]], [:],
    ["key": "value", "n": 3, "b": false, "nested": ["a": [1, 2, ["z": nil]]], "é": "ü", "": ""],
    ["button_color": "green", "max_items": 5, "express": true, "layout": ["columns": 2], "steps": ["cart", "pay"]],
]

@Suite struct JSONWriterTests {
    @Test(arguments: samples)
    func roundTripsThroughJSONDecoder(_ value: JSONValue) throws {
        let bytes = JSONWriter.encode(value)
        #expect(try decodeWithFoundation(bytes) == value)
        #expect(try JSONReader.parse(bytes) == value)
    }

    @Test func numbers() {
        #expect(JSONWriter.string(5) == "5")
        #expect(JSONWriter.string(-0.0) == "0")
        #expect(JSONWriter.string(1.5) == "1.5")
        #expect(JSONWriter.string(0.1) == "0.1")
        #expect(JSONWriter.string(1e-7) == "1e-07")
        #expect(JSONWriter.string(123456789012) == "123456789012")
        #expect(JSONWriter.string(1e20) == "1e+20")
        #expect(JSONWriter.string(.number(.nan)) == "null")
        #expect(JSONWriter.string(.number(.infinity)) == "null")
        #expect(JSONWriter.string(.number(-.infinity)) == "null")
    }

    @Test func stringEscapes() {
        #expect(JSONWriter.string("a\"b\\c") == #""a\"b\\c""#)
        #expect(JSONWriter.string("\n\r\t\u{08}\u{0C}") == #""\n\r\t\b\f""#)
        #expect(JSONWriter.string("\u{00}\u{01}\u{1F}") == #""\u0000\u0001\u001f""#)
        #expect(JSONWriter.string("é/🚀") == "\"é/🚀\"")
    }

    @Test func keysAreSorted() {
        let value: JSONValue = ["zeta": 1, "alpha": ["y": true, "b": nil], "mid": "x"]
        #expect(JSONWriter.string(value) == #"{"alpha":{"b":null,"y":true},"mid":"x","zeta":1}"#)
        // Same value built in another order: same bytes.
        let other: JSONValue = ["mid": "x", "alpha": ["b": nil, "y": true], "zeta": 1]
        #expect(JSONWriter.encode(value) == JSONWriter.encode(other))
    }

    @Test func boolAndNumberStayApart() throws {
        let bytes = JSONWriter.encode(["t": true, "one": 1, "f": false, "zero": 0])
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"f":false,"one":1,"t":true,"zero":0}"#)
    }
}

@Suite struct JSONReaderTests {
    /// Documents JSONDecoder accepts: the reader gives the same value.
    static let valid: [String] = [
        "0", "-0", "1", "-1", "10", "1.25", "1e3", "1E+3", "1e-3", "-0.5e2", "123456789012345678901234567890",
        "0.1", "4.9e-324", "1.7976931348623157e308", "9007199254740993",
        #""""#, #""\u00e9\ud83d\ude80""#, #""\"\\\/\b\f\n\r\t""#, "\"é\"",
        "true", "false", "null", " \t\r\n true \n",
        "[]", "[ ]", "[1,[2,[3]]]", "{}", "{ }", #"{"a":{"b":[true,null,"x"]}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"isEnabled","params":{"key":"new_checkout","default":false}}"#,
    ]

    @Test(arguments: valid)
    func agreesWithJSONDecoder(_ text: String) throws {
        let bytes = Array(text.utf8)
        #expect(try JSONReader.parse(bytes) == decodeWithFoundation(bytes))
    }

    static let invalid: [String] = [
        "", " ", "tru", "nul", "True", "01", "-", "1.", ".5", "1e", "1e+", "+1", "0x10", "NaN", "Infinity",
        "1e400", "-1e400", "[1,]", "[1 2]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{'a':1}", "{\"a\":1",
        "[", "\"abc", "\"a\tb\"", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"",
        "1 2", "{} x", "[]]",
    ]

    @Test(arguments: invalid)
    func refusesInvalidJSON(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONReader.parse(text) }
    }

    @Test func refusesInvalidUTF8() {
        for bytes: [UInt8] in [[0x22, 0xFF, 0x22], [0x22, 0xC3, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22],
                               [0x22, 0xC0, 0xAF, 0x22], [0xFE], [0x22, 0x5C, 0x6E, 0xE2, 0x82, 0x22]] {
            #expect(throws: JSONParseError.self) { try JSONReader.parse(bytes) }
        }
    }

    @Test func limitsNesting() throws {
        let deep = String(repeating: "[", count: JSONReader.maximumDepth) + String(repeating: "]", count: JSONReader.maximumDepth)
        _ = try JSONReader.parse(deep)
        let tooDeep = "[" + deep + "]"
        #expect(throws: JSONParseError.self) { try JSONReader.parse(tooDeep) }
    }

    @Test func duplicateKeyLastWins() throws {
        // JSONDecoder keeps the first, JSONSerialization the last; the reader, like A.3, the last.
        #expect(try JSONReader.parse(#"{"a":1,"a":2}"#) == ["a": 2])
    }

    /// `.rejectKey` (a JSON-RPC request): a key twice in one object is an error naming it, at
    /// any depth, escapes decoded (`"\u006d"` is `m`); a key with a NUL or a control character is
    /// another key, kept whole. (Before: `{"method":"get","method":"metrics"}` read as metrics.)
    @Test func duplicateKeysCanBeRefusedByName() throws {
        func duplicate(_ text: String) -> String? {
            do {
                _ = try JSONReader.parse(text, duplicateKeys: .rejectKey)
                return nil
            } catch {
                return error.duplicateKey
            }
        }
        #expect(duplicate(#"{"method":"get","method":"metrics"}"#) == "method")
        #expect(duplicate(#"{"method":"get","\u006dethod":"metrics"}"#) == "method")
        #expect(duplicate(#"{"a":[{"params":{"key":"x","key":"y"}}]}"#) == "key")
        #expect(duplicate(#"{"method":"get","method\u0000":"metrics","method\u001b":1}"#) == nil)
        #expect(duplicate(#"[{"k":1},{"k":2}]"#) == nil)
        let kept = try JSONReader.parse(#"{"key\u0000x":1,"key":2}"#, duplicateKeys: .rejectKey)
        #expect(kept.objectValue?.keys.sorted() == ["key", "key\u{0}x"])
        #expect(throws: JSONParseError(offset: 35, reason: "duplicate key \"method\"", duplicateKey: "method")) {
            try JSONReader.parse(#"{"method":"get","method":"metrics"}"#, duplicateKeys: .rejectKey)
        }
    }

    /// Objects inside objects and arrays each get their own members (they share one stack
    /// while parsing), in both duplicate-key modes.
    @Test func nestedObjectsKeepTheirOwnMembers() throws {
        let text = #"{"a":{"x":1,"y":{"z":[{"k":1},{"k":2,"j":[]},{}]}},"b":2,"c":{"d":{}},"e":3}"#
        let expected: JSONValue = ["a": ["x": 1, "y": ["z": [["k": 1], ["k": 2, "j": []], [:]]]], "b": 2, "c": ["d": [:]], "e": 3]
        #expect(try JSONReader.parse(Array(text.utf8)) == expected)
        #expect(try JSONReader.parse(Array(text.utf8), duplicateKeys: .reject) == expected)
        #expect(try JSONReader.parse(Array(#"{"a":{"k":1,"k":2},"k":{"k":3},"k":4}"#.utf8)) == ["a": ["k": 2], "k": 4])
        #expect(throws: JSONParseError(offset: 31, reason: "duplicate key \"k\"", path: [.key("a"), .index(1)], duplicateKey: "k")) {
            try JSONReader.parse(Array(#"{"a":[{"k":1},{"j":1,"k":2,"k":3}]}"#.utf8), duplicateKeys: .reject)
        }
        // The same key in sibling objects is no duplicate.
        #expect(try JSONReader.parse(Array(#"[{"k":1},{"k":2}]"#.utf8), duplicateKeys: .reject) == [["k": 1], ["k": 2]])
    }

    @Test func numbersKeepTheirKind() throws {
        let v = try JSONReader.parse(#"{"a":1,"b":true,"c":0,"d":false}"#)
        #expect(v["a"] == .number(1))
        #expect(v["b"] == .bool(true))
        #expect(v["c"] == .number(0))
        #expect(v["d"] == .bool(false))
    }

    @Test func errorSaysWhere() {
        do {
            _ = try JSONReader.parse(#"{"a":tru}"#)
            Issue.record("parsed")
        } catch {
            #expect(error.offset == 5)
            #expect(error.description == "invalid literal at byte 5")
        }
    }
}
