import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// RF-10 against RF-2 in a long outage (found by the soak runner: a retry whose backoff had
/// grown to near the hour fell 38 s before the hourly slot, and both were sent).
@Suite struct OutageRetryTests {
    /// One device in the foreground, its flags served once, then every flags request answered
    /// `outage` for `hours`, stepped one event at a time. After each failure, `afterFailure`
    /// sees the agent's timers and when the failed request was sent.
    static func outage(hwid: String, seed: UInt64, outage: HTTPOutcome, hours: Double,
                       afterFailure: ([(kind: AgentMachine.TimerKind, deadline: Seconds)], Seconds) -> Void) -> VirtualLoop {
        let loop = VirtualLoop(store: MemoryStore(committed: PersistentState(hwid: hwid)), seed: seed, start: false)
        loop.serve([checkout])
        loop.agent.start()
        loop.run(for: 1)
        loop.failFlags(with: outage)
        let end = loop.clock.monotonic + hours * 3600
        var failures = 0
        while let next = [loop.timer.deadline, loop.transport.nextDelivery].compactMap({ $0 }).min(), next <= end {
            loop.run(until: max(next, loop.clock.monotonic))
            let failed = loop.log.events.filter { if case .refreshFailed = $0 { true } else { false } }.count
            if failed > failures {
                failures = failed
                afterFailure(loop.agent.timers, loop.flagRequests.last!.sentAt)
            }
        }
        return loop
    }

    @Test("RF-10: in a long outage no two flags requests come less than a minute apart; each failure leaves one next attempt, a retry or the hourly refresh")
    func retriesKeepAMinuteFromTheHourlyRefresh() {
        let outages: [(String, HTTPOutcome)] = [
            ("503", ScriptedTransport.http(503)),
            // A Retry-After just short of the hour puts nearly every retry next to a slot.
            ("503 Retry-After 3500", ScriptedTransport.http(503, headers: ["retry-after": "3500"])),
        ]
        var requests = 0, failuresChecked = 0, leftToTheHour = 0
        for (name, outcome) in outages {
            for device in 0..<12 {
                let hwid = "HWID-outage-\(device)"
                let loop = Self.outage(hwid: hwid, seed: UInt64(device + 1), outage: outcome, hours: 48) { timers, sentAt in
                    failuresChecked += 1
                    let retries = timers.filter { $0.kind == .retry }
                    let hourly = timers.filter { $0.kind == .refresh }
                    #expect(retries.count <= 1 && hourly.count == 1, "\(name), \(hwid): timers \(timers)")
                    guard let hour = hourly.first?.deadline else { return }
                    if let retry = retries.first?.deadline {
                        // A minute after the failed request at least, and not in the minute before the
                        // hourly refresh (one after it is cleared by it, or held with it by Retry-After).
                        #expect(retry >= sentAt + 60, "\(name), \(hwid): a retry \(retry - sentAt) s after the failed request")
                        #expect(!(hour - 60 < retry && retry <= hour), "\(name), \(hwid): the hourly refresh \(hour - retry) s after the retry")
                    } else {
                        leftToTheHour += 1
                        #expect(hour >= sentAt + 60, "\(name), \(hwid): the hourly refresh \(hour - sentAt) s after the failed request")
                    }
                }
                let times = loop.flagRequests.map(\.sentAt)
                requests += times.count
                #expect(times.count >= 48, "\(name), \(hwid): \(times.count) flags requests in 48 h")
                for (a, b) in zip(times, times.dropFirst()) where b - a < 60 {
                    Issue.record("\(name), \(hwid): flags requests at \(a) and \(b), \(b - a) s apart")
                }
            }
        }
        #expect(failuresChecked > 1000)
        #expect(leftToTheHour > 0, "no retry fell next to the hourly refresh: the test proves nothing")
        print("OutageRetryTests: \(requests) flags requests, \(failuresChecked) failures checked, \(leftToTheHour) retries left to the hourly refresh")
    }
}
