import AgentCore
import EmulatorCore
import Testing

func parseApp(_ text: String) throws(DefinitionError) -> Application {
    try Application(json: StrictJSONParser.parse(text))
}

/// The error message for an invalid definition, or nil when it is valid.
func definitionError(_ text: String) -> String? {
    do {
        _ = try parseApp(text)
        return nil
    } catch {
        return error.description
    }
}

@Suite struct DefinitionTests {
    @Test func decodesTheProtocolExampleAndFillsDefaults() throws {
        let app = try parseApp("""
            {"code": "ABCDE-12345", "flags": [
              {"key": "new_checkout",
               "properties": {"button_color": {"type": "string", "default": "blue"},
                              "max_items": {"type": "number", "default": 3}},
               "rules": [{"id": "r_1a2b3c4d", "enabled": true,
                          "when": {"userIds": ["alice"], "hwids": [], "pushRegistered": true,
                                   "eventsPosted": ["PW_Purchase"], "rolloutPercent": 50,
                                   "sawFeature": {"flag": "new_checkout", "days": 30}},
                          "properties": {"button_color": "green"}}]},
              {"key": "bare"}]}
            """)
        #expect(app.code == "ABCDE-12345")
        #expect(app.featureFlagsInPlan)
        #expect(app.flags.map(\.key) == ["new_checkout", "bare"])
        let rule = app.flags[0].rules[0]
        #expect(rule.when == Conditions(userIds: ["alice"], hwids: [], pushRegistered: true, eventsPosted: ["PW_Purchase"],
                                        rolloutPercent: 50, sawFeature: .init(flag: "new_checkout", days: 30)))
        #expect(rule.properties == ["button_color": "green"])
        #expect(app.flags[1] == FlagDefinition(key: "bare"))
        // The canonical form reads back to the same definition.
        #expect(try Application(json: app.json) == app)
    }

    @Test(arguments: [
        (#"{"code": "A", "flags": [{"key": "f"}, {"key": "g"}, {"key": "f"}]}"#,
         #"flags[2].key: duplicate flag key "f" (first at flags[0])"#),
        (#"{"code": "A", "flags": [{"key": "f"}, {"key": "g"}, {"key": "h", "rules": [{"id": "r", "enabled": true, "when": {"rolloutPercent": 101}}]}]}"#,
         "flags[2].rules[0].when.rolloutPercent: expected a number 0-100, found 101"),
        (#"{"code": "A", "flags": [{"key": "f", "rules": [{"id": "r", "enabled": true, "when": {"rolloutPercent": "50"}}]}]}"#,
         "flags[0].rules[0].when.rolloutPercent: expected a number 0-100, found string"),
        (#"{"code": "A", "flags": [{"key": "f", "colour": 1}]}"#,
         "flags[0].colour: unknown field (expected one of: archived, key, killed, properties, rules)"),
        (#"{"code": "A", "extra": true}"#, "extra: unknown field (expected one of: code, featureFlagsInPlan, flags)"),
        (#"{"flags": []}"#, "code: missing (expected a string)"),
        (#"{"code": "A", "featureFlagsInPlan": 1}"#, "featureFlagsInPlan: expected a boolean, found number"),
        (#"{"code": "A", "flags": {}}"#, "flags: expected an array of flags, found object"),
        (#"{"code": "A", "flags": [{"key": "f", "killed": "yes"}]}"#, "flags[0].killed: expected a boolean, found string"),
        (#"{"code": "A", "flags": [{"key": "f", "properties": {"p": {"type": "integer", "default": 1}}}]}"#,
         #"flags[0].properties.p.type: unknown type "integer" (expected string, number, boolean or json)"#),
        (#"{"code": "A", "flags": [{"key": "f", "properties": {"p": {"type": "number", "default": true}}}]}"#,
         "flags[0].properties.p.default: expected a number for a number property, found boolean"),
        (#"{"code": "A", "flags": [{"key": "f", "properties": {"p": {"type": "boolean", "default": 0}}}]}"#,
         "flags[0].properties.p.default: expected a boolean for a boolean property, found number"),
        (#"{"code": "A", "flags": [{"key": "f", "properties": {"p": {"type": "json", "default": "{}"}}}]}"#,
         "flags[0].properties.p.default: expected an object or an array for a json property, found string"),
        (#"{"code": "A", "flags": [{"key": "f", "properties": {"p": {"type": "string"}}}]}"#,
         "flags[0].properties.p.default: missing (expected a string)"),
        (#"{"code": "A", "flags": [{"key": "f", "properties": {"p": {"type": "string", "default": "a"}}, "rules": [{"id": "r", "enabled": true, "properties": {"p": 5}}]}]}"#,
         "flags[0].rules[0].properties.p: expected a string for a string property, found number"),
        (#"{"code": "A", "flags": [{"key": "f", "rules": [{"id": "r", "enabled": true, "properties": {"q": 5}}]}]}"#,
         "flags[0].rules[0].properties.q: not a declared property of this flag (declared: )"),
        (#"{"code": "A", "flags": [{"key": "f", "rules": [{"id": "r"}]}]}"#, "flags[0].rules[0].enabled: missing (expected a boolean)"),
        (#"{"code": "A", "flags": [{"key": "f", "rules": [{"id": "r", "enabled": true}, {"id": "r", "enabled": false}]}]}"#,
         #"flags[0].rules[1].id: duplicate rule id "r" (first at flags[0].rules[0])"#),
        (#"{"code": "A", "flags": [{"key": "f", "rules": [{"id": "r", "enabled": true, "when": {"userIds": ["a", 1]}}]}]}"#,
         "flags[0].rules[0].when.userIds[1]: expected a string, found number"),
        (#"{"code": "A", "flags": [{"key": "f", "rules": [{"id": "r", "enabled": true, "when": {"segment": 1}}]}]}"#,
         "flags[0].rules[0].when.segment: unknown field (expected one of: eventsPosted, hwids, pushRegistered, rolloutPercent, sawFeature, userIds)"),
        (#"{"code": "A", "flags": [{"key": "f", "rules": [{"id": "r", "enabled": true, "when": {"sawFeature": {"flag": "f", "days": 0}}}]}]}"#,
         "flags[0].rules[0].when.sawFeature.days: expected a number of days greater than 0"),
        (#"{"code": "A", "flags": [{"key": "f", "rules": [{"id": "r", "enabled": true, "when": {"pushRegistered": "true"}}]}]}"#,
         "flags[0].rules[0].when.pushRegistered: expected a boolean, found string"),
        (#"{"code": "A", "flags": [{"key": ""}]}"#, "flags[0].key: expected a non-empty string"),
        (#"[]"#, "expected an object, found array"),
    ])
    func rejectsInvalidDefinitionsNamingThePath(_ text: String, _ expected: String) {
        #expect(definitionError(text) == expected)
    }

    @Test func urlCodeAndKeyMustMatchTheBody() throws {
        #expect(try Application(json: ["flags": []], expectedCode: "A").code == "A")
        #expect(throws: DefinitionError.self) { try Application(json: ["code": "B"], expectedCode: "A") }
        #expect(try FlagDefinition(json: [:], expectedKey: "f").key == "f")
        #expect(throws: DefinitionError.self) { try FlagDefinition(json: ["key": "g"], expectedKey: "f") }
    }

    @Test func appsFileTakesOneObjectOrAnArray() throws {
        #expect(try Application.decodeList(["code": "A"]).map(\.code) == ["A"])
        #expect(try Application.decodeList([["code": "A"], ["code": "B"]]).map(\.code) == ["A", "B"])
        #expect(throws: DefinitionError([.index(1), .key("code")], #"duplicate application code "A" (first at [0])"#)) {
            try Application.decodeList([["code": "A"], ["code": "A"]])
        }
        #expect(throws: DefinitionError([.index(0), .key("flags"), .index(0), .key("key")], "missing (expected a string)")) {
            try Application.decodeList([["code": "A", "flags": [[:]]]])
        }
    }
}
