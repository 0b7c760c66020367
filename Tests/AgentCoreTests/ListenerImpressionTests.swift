import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// docs/rules.md §4 (listeners) and §5 (impressions).
@Suite struct ListenerTests {
    @Test("LS-1: notified after a refresh that changed anything; not after one that changed nothing")
    func notifiesOnChangeOnly() {
        let loop = VirtualLoop.serving([checkout, dark], settings: settings { $0.flags.disableThrottle = true })
        #expect(loop.log.changes.count == 1)
        #expect(loop.log.changes[0].keys == ["dark_mode", "new_checkout"])
        _ = loop.refreshAndWait()
        #expect(loop.log.changes.count == 1)
        var changed = checkout
        changed.properties["max_items"] = 6  // one property value
        loop.serve([changed, dark])
        _ = loop.refreshAndWait()
        #expect(loop.log.changes.last?.keys == ["new_checkout"])
        loop.serve([changed])  // a key removed
        _ = loop.refreshAndWait()
        #expect(loop.log.changes.last?.keys == ["dark_mode"])
        var ruled = changed
        ruled.ruleId = "r_other"  // rule only
        loop.serve([ruled])
        _ = loop.refreshAndWait()
        #expect(loop.log.changes.last?.keys == ["new_checkout"])
        #expect(loop.log.changes.allSatisfy { $0.reason == .refresh })
    }

    // LS-2 (headless: the socket subscription) is tested in AgentDaemonTests; here the
    // core's side: a failed refresh notifies nobody.
    @Test func failedRefreshNotifiesNobody() {
        let loop = VirtualLoop.serving([checkout], settings: settings { $0.flags.disableThrottle = true })
        loop.failFlags(with: ScriptedTransport.http(500))
        _ = loop.refreshAndWait()
        #expect(loop.log.changes.count == 1)
    }

    @Test("LS-3: expired and discarded notifications carry their reason")
    func expiryAndDiscardAreNotified() {
        let loop = VirtualLoop.serving([checkout])
        loop.transport.script = { _ in .hold }
        loop.agent.setUserId("bob")
        #expect(loop.log.changes.last?.reason == .discarded)
        #expect(loop.log.changes.last?.keys == ["new_checkout"])

        let expiring = VirtualLoop.serving([checkout], settings: settings { $0.flags.storedFlagsLifetime = 600; $0.flags.refreshInterval = 3600 })
        expiring.failFlags(with: .noResponse(reason: "down"))
        expiring.run(for: 601)  // the expiry timer fires without any read
        #expect(expiring.log.changes.last?.reason == .expired)
        #expect(expiring.log.changes.filter { $0.reason == .expired }.count == 1)
    }
}

@Suite struct ImpressionTests {
    func impressions(_ loop: VirtualLoop) -> [JSONValue] {
        loop.transport.requests("postEvent").map(\.body).filter { $0["event"] == "PW_FeatureFlagImpression" }
    }

    @Test("IM-1, IM-2: the event and its exact attributes, `enabled` a JSON boolean")
    func impressionEventShape() {
        let loop = VirtualLoop.serving([checkout, banner])
        #expect(loop.agent.logImpression("new_checkout"))
        #expect(loop.agent.logImpression("promo_banner"))  // logged in the off branch too
        loop.settle()
        let sent = impressions(loop)
        #expect(sent.count == 2)
        #expect(sent[0]["attributes"] == ["flag_key": "new_checkout", "rule_id": "r_1a2b3c4d", "enabled": true])
        #expect(sent[1]["attributes"] == ["flag_key": "promo_banner", "rule_id": "", "enabled": false])
        #expect(sent[0]["attributes"]?["enabled"]?.boolValue == true)
        let utc = sent[0]["timestampUTC"]?.numberValue ?? 0
        #expect(sent[0]["timestampCurrent"]?.numberValue == utc + 3600)
        #expect(Int(utc) == Int(loop.clock.wall.timeIntervalSince1970))
    }

    @Test("IM-3: once per flag, rule and state per session; none without a flag; a new user starts afresh")
    func oncePerFlagRuleStateAndSession() {
        let loop = VirtualLoop.serving([checkout], settings: settings { $0.flags.disableThrottle = true })
        #expect(loop.agent.logImpression("new_checkout"))
        #expect(!loop.agent.logImpression("new_checkout"))
        #expect(!loop.agent.logImpression("absent"))
        var off = checkout
        off.isEnabled = false
        loop.serve([off])
        _ = loop.refreshAndWait()
        #expect(loop.agent.logImpression("new_checkout"))  // another state
        #expect(!loop.agent.logImpression("new_checkout"))
        loop.agent.setAppState(.background)
        loop.run(for: 1800)
        loop.agent.setAppState(.active)  // a new session
        loop.run(for: 1)
        #expect(loop.agent.logImpression("new_checkout"))
        loop.agent.setUserId("bob")
        loop.run(for: 1)
        #expect(loop.agent.logImpression("new_checkout"))  // the new user's first exposure
        #expect(impressions(loop).count == 4)
    }

    @Test("IM-4: a failed send is sent again on the next call")
    func failedImpressionIsResent() {
        let loop = VirtualLoop.serving([checkout])
        loop.transport.script = { r in
            r.method == "postEvent" ? .answer(ScriptedTransport.http(500)) : .answer(ScriptedTransport.ok())
        }
        #expect(loop.agent.logImpression("new_checkout"))
        loop.settle()
        loop.transport.script = { _ in .answer(ScriptedTransport.ok()) }
        #expect(loop.agent.logImpression("new_checkout"))
        loop.settle()
        #expect(!loop.agent.logImpression("new_checkout"))
        #expect(impressions(loop).count == 2)
    }
}
