import Foundation
import Testing
@testable import AgentJSON

@Suite struct JSONValueTests {
    @Test("FF-5: a Boolean is never a Number and a Number never a Boolean")
    func booleanAndNumberStayApart() throws {
        let v = try JSONDecoder().decode(JSONValue.self, from: Data(#"{"a":1,"b":true,"c":0,"d":false,"e":1.5}"#.utf8))
        #expect(v["a"] == .number(1))
        #expect(v["b"] == .bool(true))
        #expect(v["c"] == .number(0))
        #expect(v["d"] == .bool(false))
        #expect(v["a"]?.boolValue == nil)
        #expect(v["b"]?.numberValue == nil)
        #expect(v["e"] == .number(1.5))
    }

    @Test func roundTripKeepsKinds() throws {
        let v: JSONValue = ["n": 5, "b": true, "s": "x", "a": [1, "y", nil], "o": ["k": false], "f": 2.25]
        let enc = JSONEncoder(); enc.outputFormatting = .sortedKeys
        let data = try enc.encode(v)
        #expect(String(decoding: data, as: UTF8.self) == #"{"a":[1,"y",null],"b":true,"f":2.25,"n":5,"o":{"k":false},"s":"x"}"#)
        #expect(try JSONDecoder().decode(JSONValue.self, from: data) == v)
    }
}
