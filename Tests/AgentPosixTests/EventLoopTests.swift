import AgentPosix
import Dispatch
import Glibc
import Testing

@Suite struct EventLoopTests {
    @Test func timersFireInDeadlineOrderAndCancelledOnesNever() throws {
        let clock = ManualLoopClock()
        let thread = try LoopThread(clock: clock)
        defer { thread.stop() }
        let fired = Shared<[String]>([])
        let early = Shared<Bool>(false)
        try thread.sync { loop, _ in
            let start = loop.now
            func at(_ offset: Double, _ name: String) -> EventLoop.TimerHandle {
                let deadline = start + offset
                return loop.schedule(at: deadline) {
                    if loop.now < deadline { early.update { $0 = true } }
                    fired.update { $0.append(name) }
                }
            }
            _ = at(0.03, "c")
            _ = at(0.01, "a")
            let cancelled = at(0.015, "x")
            _ = at(0.02, "b")
            _ = at(0.04, "d1")
            _ = at(0.04, "d2")
            let cancelledFirst = at(0.005, "y")
            loop.cancel(cancelled)
            loop.cancel(cancelledFirst)
        }
        try thread.advance(clock, by: 0.009)
        #expect(fired.value == [])
        try thread.advance(clock, by: 0.016)  // 0.025: a and b, not the cancelled x
        #expect(fired.value == ["a", "b"])
        try thread.advance(clock, by: 0.025)
        #expect(fired.value.count == 5)
        try thread.advance(clock, by: 600)
        #expect(fired.value == ["a", "b", "c", "d1", "d2"])
        #expect(!early.value)
    }

    @Test func manyTimersWithCancellationsFireInOrder() throws {
        let clock = ManualLoopClock()
        let thread = try LoopThread(clock: clock)
        defer { thread.stop() }
        let fired = Shared<[Double]>([])
        let expected = try thread.sync { loop, _ -> [Double] in
            var generator = SystemRandomNumberGenerator()
            let start = loop.now
            var kept: [Double] = []
            for index in 0..<400 {
                let deadline = start + Double.random(in: 0.01...0.08, using: &generator)
                let timer = loop.schedule(at: deadline) { fired.update { $0.append(deadline) } }
                if index % 4 == 0 { kept.append(deadline) } else { loop.cancel(timer) }
            }
            // Far-away timers cancelled at once (idle timeouts of closed clients).
            for _ in 0..<1000 { loop.cancel(loop.schedule(after: 600) {}) }
            return kept.sorted()
        }
        for _ in 0..<9 { try thread.advance(clock, by: 0.01) }
        try thread.advance(clock, by: 0.02)
        #expect(fired.value.count == expected.count)
        try thread.advance(clock, by: 1_000)
        #expect(fired.value == expected)
    }

    @Test func timerScheduledFromATimerRuns() throws {
        let clock = ManualLoopClock()
        let thread = try LoopThread(clock: clock)
        defer { thread.stop() }
        let fired = Shared(0)
        try thread.sync { loop, _ in
            loop.schedule(after: 0.005) {
                fired.update { $0 += 1 }
                loop.schedule(after: 0) { fired.update { $0 += 1 } }
            }
        }
        try thread.advance(clock, by: 0.005)
        #expect(fired.value == 2)
    }

    /// A manual clock moved from another thread wakes a loop blocked in `epoll_wait`.
    @Test func advancingTheClockFromAnotherThreadWakesTheLoop() throws {
        let clock = ManualLoopClock()
        let thread = try LoopThread(clock: clock)
        defer { thread.stop() }
        let fired = Shared(false)
        try thread.sync { loop, _ in loop.schedule(after: 3_600) { fired.update { $0 = true } } }
        clock.advance(by: 3_599)
        try thread.sync { _, _ in }
        #expect(!fired.value)
        clock.advance(by: 1)
        #expect(waitUntil { fired.value })
    }

    @Test func inboxFromOtherThreadsWakesTheLoopAndRunsOnIt() throws {
        let thread = try LoopThread()
        defer { thread.stop() }
        let ran = Shared(0)
        let offThread = Shared(0)
        usleep(20_000)  // let the loop block in epoll_wait with no timers
        DispatchQueue.concurrentPerform(iterations: 200) { _ in
            thread.inbox.post { [loop = thread.loop] in
                if !loop.isOnLoopThread { offThread.update { $0 += 1 } }
                ran.update { $0 += 1 }
            }
        }
        #expect(waitUntil { ran.value == 200 })
        #expect(offThread.value == 0)
    }

    @Test func idleLoopDoesNotWakeUp() throws {
        let thread = try LoopThread()
        defer { thread.stop() }
        try thread.sync { _, _ in }
        usleep(20_000)  // real time on purpose (here and below): what is measured is that
        let before = thread.loop.wakeups  // nothing wakes the loop while real time passes
        usleep(200_000)
        #expect(thread.loop.wakeups == before)

        // One timer: one wake-up (give or take the post that scheduled it).
        let fired = Shared(false)
        try thread.sync { loop, _ in loop.schedule(after: 0.1) { fired.update { $0 = true } } }
        let afterPost = thread.loop.wakeups
        #expect(waitUntil { fired.value })
        usleep(150_000)
        #expect(thread.loop.wakeups - afterPost <= 2)
    }

    @Test func cancelledTimerCausesNoWakeUp() throws {
        let thread = try LoopThread()
        defer { thread.stop() }
        try thread.sync { loop, _ in
            let timer = loop.schedule(after: 0.05) {}
            loop.cancel(timer)
        }
        let before = thread.loop.wakeups
        usleep(150_000)
        #expect(thread.loop.wakeups == before)
    }

    @Test func deferredWorkRunsAfterTheIterationsHandlers() throws {
        let thread = try LoopThread()
        defer { thread.stop() }
        let order = Shared<[String]>([])
        try thread.sync { loop, _ in
            loop.deferToEndOfIteration { order.update { $0.append("deferred") } }
            order.update { $0.append("handler") }
        }
        #expect(waitUntil { order.value.count == 2 })
        #expect(order.value == ["handler", "deferred"])
    }

    @Test func readinessHandlersSeeReadableAndHangup() throws {
        let thread = try LoopThread()
        defer { thread.stop() }
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        let ours = fds[0], theirs = fds[1]
        let seen = Shared<[EventLoop.Events]>([])
        try thread.sync { loop, _ in
            try loop.register(ours, interest: .read) { events in
                seen.update { $0.append(events) }
                var byte: UInt8 = 0
                if read(ours, &byte, 1) <= 0 { loop.unregister(ours) }
            }
        }
        #expect(write(theirs, "x", 1) == 1)
        #expect(waitUntil { seen.value.count == 1 })
        #expect(seen.value.first?.contains(.readable) == true)
        close(theirs)
        #expect(waitUntil { seen.value.count == 2 })
        #expect(seen.value.last?.contains(.hangup) == true)
        try thread.sync { loop, _ in #expect(!loop.isRegistered(ours)) }
        close(ours)
    }

    @Test func stopEndsRunAfterWorkHandedOverBefore() throws {
        let thread = try LoopThread()
        let ran = Shared(false)
        thread.inbox.post { ran.update { $0 = true } }
        thread.stop()
        #expect(ran.value)
    }
}

@Suite struct SignalSourceTests {
    /// Sends a thread-directed signal to the loop thread only, after that
    /// thread blocked it: the rest of the test process never sees it.
    /// SIGWINCH is used because its default action is to be ignored, so
    /// even a broken mask could not disturb the test runner; SIGHUP and
    /// SIGTERM go through the same signalfd path in the daemon's tests.
    @Test func signalBlockedOnTheLoopThreadIsDeliveredToTheHandler() throws {
        let thread = try LoopThread()
        defer { thread.stop() }
        let received = Shared<[Int32]>([])
        let loopThread = try thread.sync { loop, box -> UInt in
            try SignalSource.block([SIGWINCH])
            let source = try SignalSource(loop: loop, signals: [SIGWINCH]) { signal in
                received.update { $0.append(signal) }
            }
            box.objects.append(source)
            return UInt(pthread_self())
        }
        #expect(pthread_kill(pthread_t(loopThread), SIGWINCH) == 0)
        #expect(waitUntil { received.value == [SIGWINCH] })
        #expect(pthread_kill(pthread_t(loopThread), SIGWINCH) == 0)
        #expect(waitUntil { received.value == [SIGWINCH, SIGWINCH] })
    }
}
