import AgentCore
import Foundation
import Testing

/// What a decoder made of a body: the state, or the error's description.
enum StateOutcome: Equatable, CustomStringConvertible {
    case state(PersistentState)
    case failure(String)

    init(_ decode: () throws -> PersistentState) {
        do { self = .state(try decode()) } catch { self = .failure("\(type(of: error)): \(error)") }
    }

    var description: String {
        switch self {
        case .state(let s): "state \(JSONWriter.string(s.json))"
        case .failure(let f): f
        }
    }

    /// Equal, or both refusing the body for an incomplete flag: with several, which one the tree
    /// path named depended on its dictionary's order (the new path names the first in the body).
    func agrees(with other: StateOutcome) -> Bool {
        if self == other { return true }
        guard case .failure(let a) = self, case .failure(let b) = other else { return false }
        let incomplete = { (s: String) in s.hasPrefix("StateFormatError: state: flag ") && s.hasSuffix(" is incomplete") }
        return incomplete(a) && incomplete(b)
    }
}

/// `PersistentState(stateBody:)` reads every body as the former path did (`JSONReader.parse`
/// into a tree, then `PersistentState(json:)`, kept in StateBodyOracle.swift): the same states,
/// the same errors.
@Suite struct StateBodyTests {
    static func decoded(_ body: [UInt8]) -> StateOutcome { StateOutcome { try PersistentState(stateBody: body) } }
    static func viaTree(_ body: [UInt8]) -> StateOutcome { StateOutcome { try PersistentState.viaTree(body) } }
    static func decoded(_ text: String) -> StateOutcome { decoded(Array(text.utf8)) }

    func expectSame(_ body: [UInt8], _ comment: @autoclosure () -> String = "", sourceLocation: SourceLocation = #_sourceLocation) {
        let new = Self.decoded(body), old = Self.viaTree(body)
        #expect(new.agrees(with: old), "\(comment()) body \(String(decoding: body, as: UTF8.self).debugDescription): new \(new), old \(old)",
                sourceLocation: sourceLocation)
    }

    static func full() -> PersistentState {
        var s = PersistentState(hwid: "0E4C3D6A-5B1F-4C2D-9E8F-0A1B2C3D4E5F")
        s.userId = "alice é 🚀"
        s.push = .init(token: "ab12", notificationTypes: 7, registeredAt: Date(timeIntervalSince1970: 1_800_000_001.25))
        s.notificationAuthorization = .denied
        s.registeredUser = .init(userId: "alice", at: Date(timeIntervalSince1970: 1_800_000_002))
        s.flags = FlagSnapshot(flags: [
            "new_checkout": FeatureFlag(key: "new_checkout", isEnabled: true, ruleId: "r_1", properties: [
                "button_color": "green", "max_items": 5, "express": true, "layout": ["columns": 2, "deep": [[["x": nil]]]], "steps": ["cart", "pay"],
            ]),
            "ключ \"q\"\n": FeatureFlag(key: "ключ \"q\"\n", isEnabled: false, ruleId: "", properties: ["é": "ü\u{0}", "n": -0.5]),
            "dark": FeatureFlag(key: "dark", isEnabled: false, ruleId: "default"),
        ], receivedAt: Date(timeIntervalSince1970: 1_800_000_000.5), applicationCode: "ABCDE-12345", userId: "alice")
        s.primerLastShownAt = Date(timeIntervalSince1970: 1_800_000_100)
        s.baseURL = "https://example.test/json/1.3/"
        s.clockOffset = 3600.5
        return s
    }

    @Test("What the state writes is read back, every field")
    func roundTrip() throws {
        let states = [Self.full(), PersistentState(hwid: "H")]
        for state in states {
            let body = JSONWriter.encode(state.json)
            #expect(Self.decoded(body) == .state(state))
            expectSame(body)
        }
    }

    /// Every fault of the stored shape, with its message; the tree path says the same.
    static let faults: [(body: String, message: String)] = [
        (#"[]"#, "not an object"), (#""H""#, "not an object"), (#"null"#, "not an object"),
        (#"{}"#, "hwid is not a string"), (#"{"hwid":null}"#, "hwid is not a string"), (#"{"hwid":1}"#, "hwid is not a string"),
        (#"{"hwid":"H","userId":5}"#, "userId is not a string"),
        (#"{"hwid":"H","push":{}}"#, "push.notificationTypes is not an integer"),
        (#"{"hwid":"H","push":"x"}"#, "push.notificationTypes is not an integer"),
        (#"{"hwid":"H","push":{"token":"t","notificationTypes":1.5}}"#, "push.notificationTypes is not an integer"),
        (#"{"hwid":"H","push":{"token":"t","notificationTypes":1e300}}"#, "push.notificationTypes is not an integer"),
        (#"{"hwid":"H","push":{"notificationTypes":7}}"#, "push.token is not a string"),
        (#"{"hwid":"H","push":{"notificationTypes":7,"token":"t","registeredAt":"x"}}"#, "push.registeredAt is not a time"),
        (#"{"hwid":"H","notificationAuthorization":true}"#, "notificationAuthorization is not a string"),
        (#"{"hwid":"H","notificationAuthorization":"maybe"}"#, "unknown notificationAuthorization"),
        (#"{"hwid":"H","registeredUser":[]}"#, "registeredUser.userId is not a string"),
        (#"{"hwid":"H","registeredUser":{"userId":"u","at":null}}"#, "registeredUser.at is not a time"),
        (#"{"hwid":"H","flags":{}}"#, "flags.flags is not an object"),
        (#"{"hwid":"H","flags":7}"#, "flags.flags is not an object"),
        (#"{"hwid":"H","flags":{"flags":[]}}"#, "flags.flags is not an object"),
        (#"{"hwid":"H","flags":{"flags":{"k":{"isEnabled":true,"ruleId":"r"}}}}"#, "flag k is incomplete"),
        (#"{"hwid":"H","flags":{"flags":{"k":{"isEnabled":1,"ruleId":"r","properties":{}}}}}"#, "flag k is incomplete"),
        (#"{"hwid":"H","flags":{"flags":{"k":{"isEnabled":true,"ruleId":null,"properties":{}}}}}"#, "flag k is incomplete"),
        (#"{"hwid":"H","flags":{"flags":{"k":{"isEnabled":true,"ruleId":"r","properties":[]}}}}"#, "flag k is incomplete"),
        (#"{"hwid":"H","flags":{"flags":{"k":"flag"}}}"#, "flag k is incomplete"),
        (#"{"hwid":"H","flags":{"flags":{}}}"#, "flags.receivedAt is not a time"),
        (#"{"hwid":"H","flags":{"flags":{},"receivedAt":1}}"#, "flags.applicationCode is not a string"),
        (#"{"hwid":"H","flags":{"flags":{},"receivedAt":1,"applicationCode":"A"}}"#, "flags.userId is not a string"),
        (#"{"hwid":"H","primerLastShownAt":"yesterday"}"#, "primerLastShownAt is not a time"),
        (#"{"hwid":"H","baseURL":{}}"#, "baseURL is not a string"),
        (#"{"hwid":"H","clockOffset":"soon"}"#, "clockOffset: expected seconds ≥ 0"),
        (#"{"hwid":"H","clockOffset":-1}"#, "clockOffset: expected seconds ≥ 0"),
        // The first broken rule is the one reported, whatever the members' order in the body.
        (#"{"clockOffset":-1,"userId":5,"hwid":"H"}"#, "userId is not a string"),
        (#"{"flags":{"userId":1,"flags":{"k":{}},"receivedAt":"x"},"hwid":"H"}"#, "flag k is incomplete"),
    ]

    @Test("Every fault of the stored shape is reported with the former message")
    func faultMessages() {
        for (body, message) in Self.faults {
            #expect(Self.decoded(body) == .failure("StateFormatError: state: \(message)"), "\(body)")
            expectSame(Array(body.utf8))
        }
    }

    @Test("null is absent, unknown members are ignored, a flag's own key member is not read")
    func nullsAndUnknownMembers() {
        let body = #"{"hwid":"H","userId":null,"push":null,"registeredUser":null,"notificationAuthorization":null,"flags":null,"#
            + #""primerLastShownAt":null,"baseURL":null,"clockOffset":null,"HWID":5,"future":{"x":[1,{"y":null}]}}"#
        #expect(Self.decoded(body) == .state(PersistentState(hwid: "H")))
        expectSame(Array(body.utf8))
        let flags = #"{"hwid":"H","flags":{"flags":{"a":{"key":7,"isEnabled":true,"ruleId":"r","properties":{},"more":[]}},"#
            + #""receivedAt":5,"applicationCode":"A","userId":"U","partial":"yes"}}"#
        var expected = PersistentState(hwid: "H")
        expected.flags = FlagSnapshot(flags: ["a": FeatureFlag(key: "a", isEnabled: true, ruleId: "r")],
                                      receivedAt: Date(timeIntervalSince1970: 5), applicationCode: "A", userId: "U")
        #expect(Self.decoded(flags) == .state(expected))
        expectSame(Array(flags.utf8))
    }

    @Test("A key that comes twice counts with its last value, at every level")
    func duplicateKeysLastWins() {
        #expect(Self.decoded(#"{"hwid":1,"hwid":"H"}"#) == .state(PersistentState(hwid: "H")))
        #expect(Self.decoded(#"{"hwid":"H","hwid":1}"#) == .failure("StateFormatError: state: hwid is not a string"))
        #expect(Self.decoded(#"{"hwid":"H","push":{"notificationTypes":7,"token":"t"},"push":null}"#) == .state(PersistentState(hwid: "H")))
        #expect(Self.decoded(#"{"hwid":"H","push":{"notificationTypes":7,"token":"t"},"push":5}"#)
            == .failure("StateFormatError: state: push.notificationTypes is not an integer"))
        let bodies = [
            #"{"hwid":"H","flags":{"flags":{"k":{},"k":{"isEnabled":true,"ruleId":"r","properties":{}}},"receivedAt":1,"applicationCode":"A","userId":"U"}}"#,
            #"{"hwid":"H","flags":{"flags":{"k":{"isEnabled":true,"ruleId":"r","properties":{}},"k":{}},"receivedAt":1,"applicationCode":"A","userId":"U"}}"#,
            #"{"hwid":"H","flags":{"flags":{"k":{"isEnabled":true,"ruleId":"r","properties":{"p":1,"p":2},"isEnabled":false}},"receivedAt":1,"applicationCode":"A","userId":"U"}}"#,
            #"{"hwid":"H","flags":{"flags":{"x":{}},"flags":{"k":{"isEnabled":true,"ruleId":"r","properties":{}}},"receivedAt":1,"applicationCode":"A","userId":"U"}}"#,
            #"{"hwid":"H","flags":{"flags":{"\u00e9":{},"é":{"isEnabled":true,"ruleId":"r","properties":{}}},"receivedAt":1,"applicationCode":"A","userId":"U"}}"#,
            #"{"hwid":"H","flags":{"flags":{"a":{},"b":{},"a":{"isEnabled":true,"ruleId":"r","properties":{}}},"receivedAt":1,"applicationCode":"A","userId":"U"}}"#,
        ]
        for body in bodies { expectSame(Array(body.utf8)) }
        #expect(Self.decoded(bodies[1]) == .failure("StateFormatError: state: flag k is incomplete"))
        #expect(Self.decoded(bodies[5]) == .failure("StateFormatError: state: flag b is incomplete"))
        guard case .state(let s) = Self.decoded(bodies[2]) else { Issue.record("refused"); return }
        #expect(s.flags?.flags["k"] == FeatureFlag(key: "k", isEnabled: false, ruleId: "r", properties: ["p": 2]))
    }

    @Test("Each member of a full state removed, of each kind, or twice (before or after): read as the tree path reads it")
    func everyMemberChanged() {
        var random = SplitMix64(state: 1)
        var other = Self.full()
        other.flags?.partial = true  // (never written by the agent, but read all the same)
        other.notificationAuthorization = .authorized
        let variants = RawJSON(Self.full().json).variants + RawJSON(other.json).variants
        #expect(variants.count > 2000)
        var states = 0
        for v in variants {
            let body = Array(v.render(&random, spaced: false).utf8)
            if case .state = Self.decoded(body) { states += 1 }
            expectSame(body)
        }
        #expect(states > 300 && states < variants.count - 300, "\(states) of \(variants.count) read")
    }

    @Test("Keys and values with escapes and non-ASCII text: a key is matched as the tree's dictionary would match it")
    func escapesAndNonASCII() {
        let body = #"{"\u0068wid":"H\u00e9\ud83d\ude80","user\u0049d":"é ключ","flags":{"flags":{"e\u0301":{"isEnabled":true,"ruleId":"\"r\"\n","#
            + #""properties":{"\u00e9":"\\","k\u0000":[1,"\u0000"]}}},"receivedAt":1,"applicationCode":"A","userId":"U"},"hwid\u0000":5}"#
        guard case .state(let s) = Self.decoded(body) else { Issue.record("refused: \(Self.decoded(body))"); return }
        #expect(s.hwid == "Hé🚀" && s.userId == "é ключ")
        #expect(s.flags?.flags["é"]?.ruleId == "\"r\"\n")  // "e\u0301" is "é" as Swift strings
        #expect(s.flags?.flags["é"]?.properties == ["é": "\\", "k\u{0}": [1, "\u{0}"]])
        expectSame(Array(body.utf8))
        // A key with a NUL, or spelled otherwise than by escapes, is another key.
        #expect(Self.decoded(#"{"hwid\u0000":"H"}"#) == .failure("StateFormatError: state: hwid is not a string"))
        #expect(Self.decoded(#"{"HWID":"H"}"#) == .failure("StateFormatError: state: hwid is not a string"))
        expectSame(Array(#"{"h\u0077id":"H","b\u0061seURL":"\u0075"}"#.utf8))
    }

    @Test("Bad JSON anywhere is the error, before a wrong member, as in the tree path")
    func invalidJSON() {
        let bodies = ["", " ", "{", #"{"hwid":1"#, #"{"hwid":1,}"#, #"{"hwid":"H"} x"#, #"{"hwid":"H",,"#, #"{"hwid":"H","x":tru}"#,
                      #"{"hwid":5,"flags":{"flags":{"k":{"properties":{"a":01}}}}}"#, #"{"hwid":"\ud800"}"#, "{\"hwid\":\"a\tb\"}",
                      #"{"hwid":"H","flags":{"flags":{"k":{"isEnabled":true "ruleId":"r"}}}}"#, #"[1,2"#, #"{"a" 1}"#, #"{1:2}"#]
        for body in bodies {
            guard case .failure(let f) = Self.decoded(body), f.hasPrefix("JSONParseError: ") else { Issue.record("\(body): \(Self.decoded(body))"); continue }
            expectSame(Array(body.utf8))
        }
        expectSame([0x7B, 0x22, 0x68, 0x77, 0x69, 0x64, 0x22, 0x3A, 0x22, 0xC3, 0x22, 0x7D])  // {"hwid":"<bad UTF-8>"}
    }

    @Test("Nesting: properties as deep as the reader allows are kept; one level more is the reader's error")
    func nesting() {
        // The body's object, flags, flags.flags, the flag and its properties are five levels.
        for depth in [JSONReader.maximumDepth - 5, JSONReader.maximumDepth - 4] {
            let deep = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
            let body = #"{"hwid":"H","flags":{"flags":{"k":{"isEnabled":true,"ruleId":"r","properties":{"d":"# + deep
                + #"}}},"receivedAt":1,"applicationCode":"A","userId":"U"}}"#
            expectSame(Array(body.utf8), "depth \(depth)")
            guard case .failure = Self.decoded(body) else { #expect(depth == JSONReader.maximumDepth - 5); continue }
            #expect(depth == JSONReader.maximumDepth - 4)
        }
    }

    @Test("Every truncation of a body is refused as the tree path refuses it")
    func truncations() {
        let body = JSONWriter.encode(Self.full().json)
        for cut in 0..<body.count {
            let prefix = Array(body[..<cut])
            expectSame(prefix, "cut \(cut)")
            if case .state = Self.decoded(prefix) { Issue.record("a truncated body at \(cut) was read") }
        }
    }

    @Test("Random bodies, and bodies with one byte changed, read as the tree path reads them", arguments: 0..<4)
    func randomCorpus(seed: UInt64) {
        var g = StateBodyGenerator(seed: 0x5EED_0000 + seed)
        var states = 0, faults = 0, invalid = 0
        func check(_ body: [UInt8], _ comment: String) {
            switch Self.decoded(body) {
            case .state: states += 1
            case .failure(let f): if f.hasPrefix("JSONParseError") { invalid += 1 } else { faults += 1 }
            }
            expectSame(body, comment)
        }
        for n in 0..<1500 {
            let body = g.bodyBytes()
            check(body, "seed \(seed) body \(n)")
            for _ in 0..<3 { check(g.mutate(body), "seed \(seed) body \(n) mutated") }
        }
        // The corpus exercises all three outcomes.
        #expect(states > 500 && faults > 500 && invalid > 500, "states \(states), faults \(faults), invalid JSON \(invalid)")
    }
}
