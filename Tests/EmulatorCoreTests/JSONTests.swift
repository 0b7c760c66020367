import AgentCore
@testable import EmulatorCore
import Testing

@Suite struct StrictJSONTests {
    @Test func parsesEveryKind() throws {
        let v = try StrictJSONParser.parse(#" {"a": [1, -2.5e2, true, false, null, "x\u00e9\n\ud83d\ude00"], "b": {}} "#)
        #expect(v == .object(["a": [1, -250, true, false, nil, "xé\n😀"], "b": .object([:])]))
    }

    @Test func booleansAreNotNumbers() throws {
        #expect(try StrictJSONParser.parse("true") == .bool(true))
        #expect(try StrictJSONParser.parse("1") == .number(1))
        #expect(try StrictJSONParser.parse("1") != .bool(true))
    }

    @Test func rejectsDuplicateKeysWithThePath() {
        #expect(throws: DefinitionError([.key("flags"), .index(1), .key("properties")], "duplicate key \"x\"")) {
            try StrictJSONParser.parse(#"{"flags": [{}, {"properties": {"x": 1, "x": 2}}]}"#)
        }
    }

    @Test(arguments: ["", "{", "[1,]", "{\"a\":}", "01", "1.", "-", "\"\\x\"", "\"a\nb\"", "tru", "{} x", "\"\\ud800\"", "1e999"])
    func rejectsInvalidJSON(_ text: String) {
        #expect(throws: DefinitionError.self) { try StrictJSONParser.parse(text) }
    }

    @Test func rejectsInvalidUTF8() {
        #expect(throws: DefinitionError.self) { try StrictJSONParser.parse([0x22, 0xFF, 0x22]) }
    }

    @Test func writesSortedCompactJSON() throws {
        let v: JSONValue = ["b": [1, 2.5, true, nil], "a": "q\"\\\n\u{1}"]
        #expect(JSONWriter.string(v) == #"{"a":"q\"\\\n\u0001","b":[1,2.5,true,null]}"#)
        #expect(try StrictJSONParser.parse(JSONWriter.encode(v)) == v)
    }
}

/// docs/device-api.md A and D: the routing table answers each row's own path with that row's
/// route and methods, and nothing else.
@Suite struct RouteTableTests {
    @Test func everyRowRoutesItsOwnPath() {
        for row in Route.table {
            let path = "/" + row.pattern.map { $0 == "*" ? "kill" : $0 }.joined(separator: "/")
            let found = Route.find(path)
            #expect(found.route != .notFound, "\(path)")
            #expect(found.verbs.methods == row.verbs.methods, "\(path)")
        }
        #expect(Route(path: "/admin/apps/A/flags/k/explode") == .notFound, "an unknown flag action")
        #expect(Route(path: "/admin//apps") == .notFound)
        #expect(Route(path: "admin/apps") == .notFound)
        #expect(Route.find("/admin/apps/A").verbs.methods == ["GET", "PUT", "DELETE"], "Allow lists them in the table's order")
        #expect(Route.find("/json/1.3/getFeatureFlags").verbs["POST"]?.query == nil, "the device API ignores its query")
    }
}
