import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// docs/rules.md §1: reading flags.
@Suite struct FlagReadTests {
    @Test("FF-1: the agent serves the server's result as is, never evaluating rules itself")
    func servesTheServersResultVerbatim() {
        let loop = VirtualLoop.serving([checkout, banner, dark])
        #expect(loop.agent.get("new_checkout").value == checkout)
        #expect(loop.agent.get("dark_mode").value == dark)
    }

    @Test("FF-2: nothing before any flags exist; nothing for an absent key; keys are case-sensitive")
    func getReturnsNothingWithoutFlagsOrKey() {
        let loop = VirtualLoop(start: false)
        loop.transport.script = { _ in .hold }
        loop.agent.start()
        let before = loop.agent.get("new_checkout")
        #expect(before.value == nil)
        #expect(before.provenance.errorCode == .providerNotReady)
        #expect(before.provenance.source == .none)
        loop.transport.answerHeld("getFeatureFlags", with: ScriptedTransport.flags([checkout]))
        loop.settle()
        #expect(loop.agent.get("new_checkout").value == checkout)
        let other = loop.agent.get("New_Checkout")
        #expect(other.value == nil)
        #expect(other.provenance.errorCode == .flagNotFound)
        #expect(other.provenance.reason == .error)
    }

    @Test("FF-3: get never waits for the network — it answers while a request is held")
    func getNeverWaitsForNetwork() {
        let loop = VirtualLoop.serving([checkout], settings: settings { $0.flags.disableThrottle = true })
        loop.transport.script = { _ in .hold }
        var done = false
        loop.agent.refresh { _ in done = true }
        #expect(!done)
        #expect(loop.transport.heldCount("getFeatureFlags") == 1)
        #expect(loop.agent.get("new_checkout").value == checkout)
        #expect(loop.agent.isEnabled("new_checkout", default: false).value == true)
    }

    @Test("FF-4: key, isEnabled, ruleId; reasons follow the rule id")
    func flagCarriesRuleAndReason() {
        let loop = VirtualLoop.serving([checkout, banner, dark])
        #expect(loop.agent.get("new_checkout").provenance.reason == .targetingMatch)
        #expect(loop.agent.get("dark_mode").provenance.reason == .default)
        #expect(loop.agent.get("promo_banner").provenance.reason == .disabled)
        #expect(loop.agent.get("new_checkout").provenance.source == .network)
        #expect(loop.agent.get("new_checkout").provenance.ageSeconds != nil)
    }

    @Test("FF-5: typed reads with defaults; a Boolean is never a Number and vice versa")
    func typedPropertyReads() {
        let loop = VirtualLoop.serving([checkout])
        let a = loop.agent
        #expect(a.property("new_checkout", "button_color", type: .string, default: "blue").value == "green")
        #expect(a.property("new_checkout", "max_items", type: .number, default: 1).value == 5)
        #expect(a.property("new_checkout", "express", type: .bool, default: false).value == true)
        #expect(a.property("new_checkout", "layout", type: .jsonObject, default: .null).value == ["columns": 2])
        #expect(a.property("new_checkout", "steps", type: .jsonArray, default: .null).value == ["cart", "pay"])
        // Wrong type: the default for scalars, nothing for JSON reads.
        let boolAsNumber = a.property("new_checkout", "express", type: .number, default: 7)
        #expect(boolAsNumber.value == 7)
        #expect(boolAsNumber.provenance.errorCode == .typeMismatch)
        #expect(a.property("new_checkout", "max_items", type: .bool, default: false).value == false)
        #expect(a.property("new_checkout", "button_color", type: .jsonObject, default: .null).value == .null)
        #expect(a.property("new_checkout", "layout", type: .jsonArray, default: .null).value == .null)
        // Missing property or flag.
        #expect(a.property("new_checkout", "nope", type: .string, default: "d").value == "d")
        #expect(a.property("missing", "x", type: .number, default: 3).value == 3)
        #expect(a.property("missing", "x", type: .jsonObject, default: .null).value == .null)
    }

    @Test("FF-5: a missing property and one of another type share TYPE_MISMATCH; the message tells them apart")
    func fallbackMessages() {
        let loop = VirtualLoop.serving([checkout])
        let a = loop.agent
        let missing = a.property("new_checkout", "nope", type: .number, default: 7).provenance
        #expect(missing.errorCode == .typeMismatch && missing.reason == .error)
        #expect(missing.errorMessage == #"flag "new_checkout" has no property "nope""#)
        for (name, type, found) in [("express", PropertyType.number, "a bool"), ("max_items", .string, "a number"),
                                    ("button_color", .bool, "a string"), ("layout", .jsonArray, "a jsonObject"),
                                    ("steps", .jsonObject, "a jsonArray")] {
            let other = a.property("new_checkout", name, type: type, default: .null).provenance
            #expect(other.errorCode == .typeMismatch)
            #expect(other.errorMessage == "property \"\(name)\" of flag \"new_checkout\" is \(found), not a \(type.rawValue)")
        }
        #expect(a.isEnabled("missing", default: true).provenance.errorMessage == #"no flag "missing" in the served flags"#)
        #expect(a.property("missing", "x", type: .number, default: 3).provenance.errorMessage == #"no flag "missing" in the served flags"#)
        // Served: no message.
        #expect(a.property("new_checkout", "max_items", type: .number, default: 1).provenance.errorMessage == nil)
        #expect(a.isEnabled("new_checkout", default: false).provenance.errorMessage == nil)
    }

    @Test("FF-5: a server that sends 1 and true keeps them apart on the wire too")
    func booleanNumberKindsSurviveTheWire() throws {
        let body = Data(#"{"status_code":200,"response":{"flags":[{"key":"k","enabled":true,"rule_id":"default","properties":{"one":1,"yes":true,"zero":0}}]}}"#.utf8)
        let ok = try PushwooshAPI.classify(.response(status: 200, headers: [:], body: body)).get()
        let flags = try PushwooshAPI.parseFlags(ok.response).get().flags
        #expect(flags["k"]?.properties["one"] == .number(1))
        #expect(flags["k"]?.properties["yes"] == .bool(true))
        #expect(PropertyType.bool.matches(.number(1)) == false)
        #expect(PropertyType.number.matches(.bool(true)) == false)
    }

    @Test("FF-6: isEnabled returns the default when get would return nothing")
    func isEnabledFallsBackToDefault() {
        let loop = VirtualLoop.serving([checkout, banner])
        #expect(loop.agent.isEnabled("new_checkout", default: false).value == true)
        #expect(loop.agent.isEnabled("promo_banner", default: true).value == false)
        #expect(loop.agent.isEnabled("absent", default: true).value == true)
        #expect(loop.agent.isEnabled("absent", default: false).value == false)
    }

    @Test("FF-7: archived flags are absent; a plan without flags answers without `flags`")
    func planWithoutFlagsFallsBackEverywhere() {
        let loop = VirtualLoop(start: false)
        loop.transport.script = { r in .answer(ScriptedTransport.ok(r.method == "getFeatureFlags" ? ["partial": false] : [:])) }
        loop.agent.start()
        loop.settle()
        #expect(loop.agent.status().state == .ready)
        #expect(loop.agent.status().flagsCount == 0)
        #expect(loop.agent.isEnabled("new_checkout", default: true).value == true)
        #expect(loop.agent.get("new_checkout").provenance.errorCode == .flagNotFound)
    }

    @Test("FF-8: a killed flag arrives disabled with an empty rule and default properties")
    func killedFlagIsDisabled() {
        let loop = VirtualLoop.serving([banner])
        let e = loop.agent.get("promo_banner")
        #expect(e.value?.isEnabled == false)
        #expect(e.value?.ruleId == "")
        #expect(e.provenance.reason == .disabled)
        #expect(loop.agent.property("promo_banner", "text", type: .string, default: "x").value == "Sale")
    }

    /// A flag answer without a (string) `rule_id` names no rule: it is served as `default`, so
    /// isEnabled, ruleId and the reason agree (docs/device-api.md A.3). (Before: served as "",
    /// `isEnabled: true` with `reason: DISABLED`, and OFREP's variant "killed".)
    @Test("FF-4: a flag without rule_id is served as the default rule: isEnabled and the reason agree")
    func flagWithoutRuleIdIsServedAsDefault() {
        let answer: JSONValue = ["partial": false, "flags": [["key": "on", "enabled": true], ["key": "off", "enabled": false],
                                                             ["key": "odd", "enabled": true, "rule_id": 7]]]
        guard case .success(let parsed) = PushwooshAPI.parseFlags(answer) else { Issue.record("not parsed"); return }
        #expect(parsed.flags["on"] == FeatureFlag(key: "on", isEnabled: true, ruleId: "default"))
        #expect(parsed.flags["on"]?.reason == .default)
        #expect(parsed.flags["off"]?.ruleId == "default")
        #expect(parsed.flags["odd"]?.ruleId == "default")
        let loop = VirtualLoop(start: false)
        loop.transport.script = { r in .answer(ScriptedTransport.ok(r.method == "getFeatureFlags" ? answer : [:])) }
        loop.agent.start()
        loop.settle()
        for (key, enabled) in [("on", true), ("off", false), ("odd", true)] {
            let e = loop.agent.get(key)
            #expect(e.value?.isEnabled == enabled)
            #expect(e.value?.ruleId == "default")
            #expect(e.provenance.reason == .default, "\(key): \(e.provenance.reason)")
            #expect(loop.agent.isEnabled(key, default: !enabled).value == enabled)
        }
    }
}
