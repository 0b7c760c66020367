import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// docs/rules.md §2: storage and validity.
@Suite struct StorageTests {
    @Test("ST-1: the last complete response is stored and survives a restart")
    func storedFlagsSurviveRestart() {
        let loop = VirtualLoop.serving([checkout])
        #expect(loop.store.committed?.flags?.flags["new_checkout"] == checkout)
        loop.transport.script = { _ in .hold }  // the server is silent after the restart
        loop.restart(after: 3600)
        let e = loop.agent.get("new_checkout")
        #expect(e.value == checkout)
        #expect(e.provenance.source == .cache)
        #expect((e.provenance.ageSeconds ?? 0) >= 3600)
    }

    @Test("ST-2: a new User ID invalidates the flags at once, in memory and on disk")
    func userChangeInvalidatesAtOnce() {
        let loop = VirtualLoop.serving([checkout])
        loop.transport.script = { _ in .hold }
        loop.agent.setUserId("bob")
        #expect(loop.agent.get("new_checkout").value == nil)
        #expect(loop.agent.get("new_checkout").provenance.errorCode == .providerNotReady)
        #expect(loop.store.committed?.flags == nil)
    }

    @Test("ST-2: flags stored for another application or user are never served after a restart")
    func otherApplicationsFlagsAreNotServed() {
        let loop = VirtualLoop.serving([checkout])
        loop.transport.script = { _ in .hold }
        loop.restart(settings: settings { $0.server.applicationCode = "OTHER-00000" })
        #expect(loop.agent.get("new_checkout").value == nil)
        #expect(loop.store.committed?.flags == nil)

        let loop2 = VirtualLoop.serving([checkout])
        var state = loop2.store.committed!
        state.userId = "mallory"  // the stored flags were for the HWID user
        let store = MemoryStore(committed: state)
        let loop3 = VirtualLoop(store: store, start: false)
        loop3.transport.script = { _ in .hold }
        loop3.agent.start()
        #expect(loop3.agent.get("new_checkout").value == nil)
    }

    @Test("ST-3: at 24 hours, reads fall back to defaults, with or without a refresh, and across restarts")
    func flagsExpireAtTheirLifetime() {
        let loop = VirtualLoop.serving([checkout])
        loop.failFlags(with: .noResponse(reason: "refused"))
        loop.run(for: 24 * 3600 - 1)
        #expect(loop.agent.isEnabled("new_checkout", default: false).value == true)  // ST-4
        loop.run(for: 2)
        #expect(loop.agent.isEnabled("new_checkout", default: false).value == false)
        #expect(loop.agent.get("new_checkout").provenance.errorCode == .providerNotReady)
        #expect(loop.log.changes.contains { $0.reason == .expired && $0.keys == ["new_checkout"] })  // LS-3
        loop.restart()
        #expect(loop.agent.get("new_checkout").value == nil)
    }

    @Test("ST-3: expiry is measured from receipt across a restart: 23 h before plus 1 h after")
    func expiryCountsDowntime() {
        let loop = VirtualLoop.serving([checkout])
        loop.failFlags(with: .noResponse(reason: "refused"))
        loop.run(for: 21 * 3600)
        loop.restart(after: 3 * 3600 - 10)
        #expect(loop.agent.get("new_checkout").value == checkout)
        loop.run(for: 11)
        #expect(loop.agent.get("new_checkout").value == nil)
    }

    @Test("ST-3: a wall-clock step forward past the lifetime expires flags; a step back does not extend them")
    func wallClockStepsCannotExtendLifetime() {
        let forward = VirtualLoop.serving([checkout])
        forward.failFlags(with: .noResponse(reason: "refused"))
        forward.clock.stepWall(by: 25 * 3600)
        #expect(forward.agent.get("new_checkout").value == nil)

        let back = VirtualLoop.serving([checkout])
        back.failFlags(with: .noResponse(reason: "refused"))
        back.clock.stepWall(by: -48 * 3600)
        back.run(for: 24 * 3600 + 1)
        #expect(back.agent.get("new_checkout").value == nil)

        // Stored flags whose receipt time lies in the future are not trusted after a restart.
        let skew = VirtualLoop.serving([checkout])
        skew.transport.script = { _ in .hold }
        skew.clock.stepWall(by: -3600)
        skew.restart()
        #expect(skew.agent.get("new_checkout").value == nil)
    }

    @Test("ST-4: when the server cannot be reached, stored flags are served until they expire")
    func servesStoredFlagsWhileOffline() {
        let loop = VirtualLoop.serving([checkout])
        loop.failFlags(with: .noResponse(reason: "timed out"))
        loop.run(for: 301)
        #expect(loop.refreshAndWait()??.code == 0)
        loop.run(for: 12 * 3600)
        #expect(loop.agent.isEnabled("new_checkout", default: false).value == true)
        #expect(loop.agent.status().state == .stale)
    }

    @Test("ST-5: a partial response is served from memory but never written; it doesn't open a throttle window")
    func partialResponsesAreNotWritten() {
        let loop = VirtualLoop.serving([dark])
        loop.serve([checkout], partial: true)
        #expect(loop.refreshAndWait(timeout: 1) != nil)  // throttled: answered from the store
        loop.run(for: 301)
        #expect(loop.refreshAndWait()! == nil)
        #expect(loop.agent.get("new_checkout").value == checkout)
        #expect(loop.store.committed?.flags?.flags.keys.sorted() == ["dark_mode"])
        #expect(loop.agent.status().flagsPartial)
        // No throttle window: the next refresh sends a request at once.
        let before = loop.flagRequests.count
        _ = loop.refreshAndWait()
        #expect(loop.flagRequests.count == before + 1)
        // After a restart the partial flags are gone; the complete older ones remain.
        loop.transport.script = { _ in .hold }
        loop.restart()
        #expect(loop.agent.get("new_checkout").value == nil)
        #expect(loop.agent.get("dark_mode").value == dark)
    }

    @Test("ST-6: a failed write keeps the old stored flags; a damaged file is reported and not trusted")
    func failedWritesKeepTheOldState() {
        let loop = VirtualLoop.serving([dark])
        loop.store.fault = .crashBeforeRename
        loop.serve([checkout])
        loop.run(for: 301)
        _ = loop.refreshAndWait()
        #expect(loop.agent.get("new_checkout").value == checkout)  // still served from memory
        #expect(loop.agent.status().storageError != nil)
        loop.transport.script = { _ in .hold }
        loop.restart()
        #expect(loop.agent.get("dark_mode").value == dark)
        #expect(loop.agent.get("new_checkout").value == nil)
    }

    @Test func diskFullIsReportedAndRecovered() {
        let loop = VirtualLoop.serving([dark])
        loop.store.fault = .diskFull
        loop.serve([checkout])
        loop.run(for: 301)
        _ = loop.refreshAndWait()
        #expect(loop.log.events.contains { if case .storeFailed = $0 { true } else { false } })
        let problem = loop.agent.status().storageError
        #expect(problem?.message.contains("ENOSPC") == true)
        #expect(problem?.at == loop.agent.now.wall)  // the failure's time (device time)
        loop.store.fault = nil
        loop.run(for: Agent.saveRetryDelay + 1)  // the save is retried on its own
        #expect(loop.agent.status().storageError == nil)
        #expect(loop.store.committed?.flags?.flags["new_checkout"] == checkout)
        #expect(loop.log.events.contains(.storeRecovered))
    }

    @Test func damagedStateIsReportedNotFatal() {
        let store = MemoryStore()
        let damage = "state.json: checksum mismatch; moved to state.json.damaged-1"
        store.damageOnLoad = damage
        let loop = VirtualLoop.serving([checkout], store: store)
        #expect(loop.log.events.contains { if case .storeDamaged = $0 { true } else { false } })
        #expect(loop.agent.get("new_checkout").value == checkout)
        // status keeps saying what was found at start, with its time, after saves succeed.
        #expect(loop.agent.status().storageError?.message == damage)
        #expect(loop.agent.status().storageError.map { $0.at <= loop.agent.now.wall } == true)
    }

    @Test("A state-changing call whose save failed is reported to its caller; one that saved is not")
    func failedSaveIsReportedToTheCall() {
        let loop = VirtualLoop.serving([dark])
        let saved = loop.agent.checkingSaves { loop.agent.setUserId("alice") }
        #expect(saved.saveFailure == nil)
        loop.store.fault = .diskFull
        let failed = loop.agent.checkingSaves { loop.agent.setUserId("bob") }
        #expect(failed.saveFailure?.contains("ENOSPC") == true)
        #expect(loop.agent.userId == "bob")  // in memory; the save is retried
        // Nothing to save: nothing failed, even with the disk still full.
        #expect(loop.agent.checkingSaves { loop.agent.setUserId("bob") }.saveFailure == nil)
        // A save failing outside a checked call is not blamed on the next one.
        loop.run(for: Agent.saveRetryDelay + 1)
        loop.store.fault = nil
        #expect(loop.agent.checkingSaves { loop.agent.setUserId("carol") }.saveFailure == nil)
    }
}
