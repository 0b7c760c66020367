import AgentCore
import EmulatorCore
import Foundation
import Testing

@Suite struct LabFaultTests {
    @Test func aFaultScopedToOneHWIDLeavesTheOtherDevicesServed() throws {
        var lab = try Lab()
        #expect(lab.arm(["method": "getFeatureFlags", "hwid": "h7", "times": 3, "http": 503]).status == 200)
        for _ in 0..<3 {
            #expect(lab.call(hwid: "h1").status == 200)
            #expect(lab.call(hwid: "h7").status == 503)
        }
        #expect(lab.call(hwid: "h7").status == 200)  // its times are spent
        #expect(lab.count(["hwid": "h1", "method": "getFeatureFlags"]) == 3)
        #expect(lab.count(["hwid": "h7"]) == 4)
        let recorded = lab.admin("GET", "/admin/requests", query: ["hwid": "h7"]).json?["requests"]?.arrayValue ?? []
        #expect(recorded.map { $0["status"] } == [503, 503, 503, 200])
        #expect(recorded.allSatisfy { $0["hwid"] == "h7" })
    }

    @Test func aFaultScopedToOneUserId() throws {
        var lab = try Lab()
        #expect(lab.arm(["method": "getFeatureFlags", "userId": "bob", "statusCode": 500]).status == 200)
        #expect(lab.call(hwid: "h1", userId: "alice").json?["status_code"] == 200)
        #expect(lab.call(hwid: "h2", userId: "bob").json?["status_code"] == 500)
        #expect(lab.count(["userId": "bob"]) == 1)
        #expect(lab.count(["userId": "alice"]) == 1)
        // A body without userId is scoped by the User ID the emulator knows for the HWID.
        #expect(lab.call("registerUser", hwid: "h2", userId: "bob").status == 200)
        #expect(lab.arm(["method": "getFeatureFlags", "userId": "bob", "drop": true]).status == 200)
        #expect(lab.call(hwid: "h2").drop)
    }

    @Test func forSecondsExpiresAsTheEmulatorClockAdvances() throws {
        var lab = try Lab()
        let armed = lab.arm(["method": "getFeatureFlags", "hwid": "h7", "forSeconds": 7200, "drop": true])
        #expect(armed.json?["armed"]?["remaining"] == .null)
        #expect(armed.json?["armed"]?["until"] == .string(Timestamp.format(t0.addingTimeInterval(7200))))
        for _ in 0..<5 { #expect(lab.call(hwid: "h7").drop) }  // unlimited within the window
        #expect(!lab.call(hwid: "h1").failed)
        lab.clock.advance(by: 3600)  // real time moves the emulator's too
        #expect(lab.call(hwid: "h7").drop)
        let listed = lab.admin("GET", "/admin/faults").json?["faults"]?.arrayValue
        #expect(listed?.count == 1)
        #expect(listed?.first?["until"] == .string(Timestamp.format(t0.addingTimeInterval(7200))))
        #expect(lab.admin("POST", "/admin/clock", ["advanceSeconds": 3600]).status == 200)
        #expect(!lab.call(hwid: "h7").failed)
        #expect(lab.admin("GET", "/admin/faults").json?["faults"] == [])
    }

    @Test func timesAndForSecondsWhicheverEndsFirst() throws {
        var lab = try Lab()
        _ = lab.arm(["method": "getFeatureFlags", "times": 2, "forSeconds": 60, "http": 500])
        #expect(lab.call().status == 500)
        #expect(lab.call().status == 500)
        #expect(lab.call().status == 200)  // times first
        _ = lab.arm(["method": "getFeatureFlags", "times": 100, "forSeconds": 60, "http": 500])
        #expect(lab.call().status == 500)
        #expect(lab.admin("GET", "/admin/faults").json?["faults"]?.arrayValue?.first?["remaining"] == 99)
        lab.clock.advance(by: 60)
        #expect(lab.call().status == 200)  // the window first
    }

    /// The hit pattern of `calls` matching calls under one armed probability fault.
    func pattern(seed: Int, probability: Double = 0.5, calls: Int = 64) throws -> [Bool] {
        var lab = try Lab()
        #expect(lab.arm(["method": "getFeatureFlags", "hwid": "h7", "forSeconds": 3600, "probability": .number(probability),
                         "seed": .number(Double(seed)), "http": 503]).status == 200)
        var hits: [Bool] = []
        for k in 0..<calls {
            if k % 3 == 0 { #expect(lab.call(hwid: "h1").status == 200) }  // out of scope: draws nothing
            hits.append(lab.call(hwid: "h7").status == 503)
        }
        return hits
    }

    @Test func theSameSeedGivesTheSameHitsTwice() throws {
        let first = try pattern(seed: 42)
        #expect(try pattern(seed: 42) == first)
        #expect(try pattern(seed: 43) != first)
        let hits = first.filter { $0 }.count
        #expect((16...48).contains(hits), "\(hits) hits of 64 at p=0.5")
        #expect(try pattern(seed: 1, probability: 0).allSatisfy { !$0 })
        #expect(try pattern(seed: 1, probability: 1).allSatisfy { $0 })
    }

    @Test func splitMix64KnownValues() {
        // Reference values of SplitMix64 for seed 0 (as in Vigna's splitmix64.c).
        var r = SeededRandom(seed: 0)
        #expect(r.next() == 0xE220_A839_7B1D_CDAF)
        #expect(r.next() == 0x6E78_9E6A_A1B9_65F4)
    }

    @Test func bodyFaultsSayHowTheAnswerGoesOut() throws {
        var lab = try Lab()
        _ = lab.arm(["method": "getFeatureFlags", "truncateAfterBytes": 10])
        let truncated = lab.call()
        #expect(truncated.delivery == .truncate(afterBytes: 10) && truncated.status == 200 && truncated.render() != nil)
        _ = lab.arm(["method": "getFeatureFlags", "stallAfterHeaders": true, "hwid": "h1"])
        #expect(lab.call(hwid: "h2").delivery == .normal)
        #expect(lab.call(hwid: "h1").delivery == .stall)
        _ = lab.arm(["method": "getFeatureFlags", "reset": true, "delayMs": 5])
        let reset = lab.call()
        #expect(reset.delivery == .reset && reset.drop && reset.render() == nil && reset.delayMs == 5)
        let faults = lab.state.requestLog.select(method: "getFeatureFlags", since: nil).map(\.fault)
        #expect(faults == ["truncateAfterBytes", nil, "stallAfterHeaders", "reset"])
    }

    @Test func aProbabilityMissFallsThroughToTheNextFault() throws {
        var lab = try Lab()
        _ = lab.arm(["method": "getFeatureFlags", "probability": 0, "http": 500])
        _ = lab.arm(["method": "getFeatureFlags", "statusCode": 210])
        #expect(lab.call().json?["status_code"] == 210)
        #expect(lab.call().status == 200)
        #expect(lab.admin("GET", "/admin/faults").json?["faults"]?.arrayValue?.count == 1)
    }
}
