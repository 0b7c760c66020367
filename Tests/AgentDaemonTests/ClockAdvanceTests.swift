import AgentCore
import AgentWire
import Foundation
import Testing
@testable import AgentDaemon

/// `advanceClock` as a value (docs/device-clock.md H): each step, given the device, says what to
/// do; no loop, no agent, no clock here.
@Suite struct ClockAdvanceTests {
    static let wall0 = Date(timeIntervalSince1970: 1_800_000_000)

    /// A device at monotonic `now` whose wall clock moves with it.
    func view(_ now: Seconds, timers: [(AgentMachine.TimerKind, Seconds)] = [], sessionEndsAt: Seconds? = nil,
              inFlight: Int = 0) -> ClockAdvance.View {
        ClockAdvance.View(now: now, wall: Self.wall0.addingTimeInterval(now), timers: timers.map { (kind: $0.0, deadline: $0.1) },
                          sessionEndsAt: sessionEndsAt, requestsInFlight: inFlight)
    }

    @Test func withNoTimerDueItJumpsTheWholeWayAndSaves() {
        var a = ClockAdvance(seconds: 600)
        #expect(a.step(view(100, timers: [(.refresh, 3_700)])) == [.jump(by: 600, save: true), .answer(fired: [])])
        #expect(a.remaining == 0)
    }

    @Test func aDueTimerRunsAtItsOwnTimeAndTheJumpsAddUpToTheSecondsAsked() {
        var a = ClockAdvance(seconds: 7_200)
        // The hourly refresh at 3,600: jump there (the offset saved later), run it.
        #expect(a.step(view(0, timers: [(.refresh, 3_600), (.expired, 86_400)]))
                == [.jump(by: 3_600, save: false), .fireDueTimers])
        // Its request is on the network: the next step waits.
        #expect(a.step(view(3_600.5, timers: [(.refresh, 7_200)], inFlight: 1)) == [.waitForRequests])
        // The answer came 0.5 s later (device time flowed meanwhile); the next slot is inside
        // what is left (3,600 s): the jumps never count the network's time.
        #expect(a.step(view(3_600.5, timers: [(.refresh, 7_200)])) == [.jump(by: 3_599.5, save: false), .fireDueTimers])
        let last = a.step(view(7_200, timers: [(.refresh, 10_800)]))
        #expect(last == [.jump(by: 0.5, save: true), .answer(fired: a.fired)])
        #expect(a.fired.map(\.event) == ["refresh", "refresh"])
        #expect(a.fired.map(\.trigger) == [.periodic, .periodic])
        #expect(a.fired.map(\.at) == [Self.wall0.addingTimeInterval(3_600), Self.wall0.addingTimeInterval(7_200)])
    }

    @Test func theSessionsEndIsReportedInTimeOrderBeforeTheTimersAfterIt() {
        var a = ClockAdvance(seconds: 3_600)
        _ = a.step(view(0, timers: [(.retry, 2_000)], sessionEndsAt: 1_800))
        _ = a.step(view(2_000))
        #expect(a.fired.map(\.event) == [FiredTimer.sessionEnd, "retry"])
        #expect(a.fired.map(\.at) == [Self.wall0.addingTimeInterval(1_800), Self.wall0.addingTimeInterval(2_000)])
    }

    @Test func aTimerThatNeverClearsStopsTheAdvance() {
        var a = ClockAdvance(seconds: 60)
        var last: [ClockAdvance.Action] = []
        for _ in 0...ClockAdvance.stuckLimit {
            last = a.step(view(10, timers: [(.saveRetry, 10)]))
            if case .fail = last.first { break }
        }
        guard case .fail(let message) = last.first else { Issue.record("never stopped: \(last)"); return }
        #expect(message.contains("saveRetry"))
    }
}
