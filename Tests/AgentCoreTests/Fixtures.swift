import AgentCore
import AgentTestSupport
import Foundation

let checkout = FeatureFlag(key: "new_checkout", isEnabled: true, ruleId: "r_1a2b3c4d", properties: [
    "button_color": "green", "max_items": 5, "express": true, "layout": ["columns": 2], "steps": ["cart", "pay"],
])
let banner = FeatureFlag(key: "promo_banner", isEnabled: false, ruleId: "", properties: ["text": "Sale"])
let dark = FeatureFlag(key: "dark_mode", isEnabled: false, ruleId: "default")

extension VirtualLoop {
    /// A loop whose server answers `getFeatureFlags` with `flags` and everything else OK.
    static func serving(_ flags: [FeatureFlag], settings: AgentSettings = VirtualLoop.defaultSettings(),
                        store: MemoryStore = MemoryStore(), latency: Seconds = 0.05) -> VirtualLoop {
        let loop = VirtualLoop(settings: settings, store: store, start: false)
        loop.serve(flags, latency: latency)
        loop.agent.start()
        loop.settle()
        loop.run(for: latency)
        return loop
    }

    func serve(_ flags: [FeatureFlag], partial: Bool = false, latency: Seconds = 0.05) {
        transport.script = { recorded in
            recorded.method == "getFeatureFlags"
                ? .answer(ScriptedTransport.flags(flags, partial: partial), after: latency)
                : .answer(ScriptedTransport.ok(), after: latency)
        }
    }

    /// Makes `getFeatureFlags` answer `outcome`; other calls succeed.
    func failFlags(with outcome: HTTPOutcome) {
        transport.script = { recorded in
            recorded.method == "getFeatureFlags" ? .answer(outcome, after: 0.05) : .answer(ScriptedTransport.ok())
        }
    }

    var flagRequests: [ScriptedTransport.Recorded] { transport.requests("getFeatureFlags") }

    /// Calls `refresh` and runs until it completes; returns its error.
    func refreshAndWait(timeout: Seconds = 60) -> RefreshError?? {
        var result: RefreshError??
        agent.refresh { result = .some($0) }
        var waited: Seconds = 0
        while result == nil, waited < timeout {
            run(for: 0.05)
            waited += 0.05
        }
        return result
    }
}

func settings(_ change: (inout AgentSettings) -> Void) -> AgentSettings {
    var s = VirtualLoop.defaultSettings()
    change(&s)
    return s
}
