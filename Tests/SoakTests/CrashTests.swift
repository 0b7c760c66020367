import AgentCore
import AgentWire
import Foundation
import Glibc
@testable import Soak
import Testing

/// A crash is one violation: a process that died is not watched any more, and its lane shows
/// the crash, the end and the restart or its absence.
@Suite(.serialized) struct CrashTests {
    /// A runner whose agent 0 came up 100 s ago as `pid` and never pinged the watchdog, its
    /// notifications read up to now.
    static func runner(watching pid: Int32) throws -> (SoakRunner, NotifyLog) {
        let runner = SoakRunner(options: try SoakOptions.parse(["--agents", "1", "--quiet", "--watchdog", "4s"]))
        runner.recorder.state.withLock { s in
            s.tracks[0].pids = [pid]
            s.tracks[0].lane.readies = [now() - 100]
        }
        let notify = NotifyLog(agents: 1)
        notify.add(0, [], next: 0, asked: now())
        return (runner, notify)
    }

    @Test func aDeadProcessIsNotWatched() throws {
        // Killed from outside (SIGKILL, no restart recorded): its crash is the violation, not a watchdog cascade.
        let sleeper = Process()
        sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
        sleeper.arguments = ["30"]
        try sleeper.run()
        let pid = sleeper.processIdentifier
        let (runner, notify) = try Self.runner(watching: pid)
        // Up and silent: a watchdog violation.
        runner.checkWatchdogs(notify)
        #expect(runner.recorder.state.withLock { $0.violations.map(\.invariant) } == ["watchdog"])
        #expect(runner.exits.unreportedCrash(pid) == nil, "a running process is no crash")
        kill(pid, SIGKILL)
        let deadline = now() + 5
        while runner.exits.isUp(pid), now() < deadline { usleep(10_000) }
        notify.add(0, [], next: 0, asked: now())
        for _ in 0..<5 { runner.checkWatchdogs(notify) }
        #expect(runner.recorder.state.withLock { $0.violations.count } == 1, "no watchdog violation for the dead PID")
        let died = try #require(runner.exits.unreportedCrash(pid), "the death is a crash")
        // The lab's DEVICE record says how it ended: the crash is one violation, named by it.
        var record = try LabDeviceRecord(json: ["name": "agent-0", "socket": "/lab/devices/agent-0/agent.sock", "owned": true,
                                                "state": "exited", "pid": .null, "exit": "killed by signal 9", "exitCode": .null, "exitSignal": 9])
        let crash = try #require(SoakRunner.crash(agent: 0, pid: pid, at: died, record: record, log: ["the last line"]))
        #expect(crash.invariant == "crash" && crash.agent == 0 && crash.pid == pid && crash.time == died)
        #expect(crash.message == "agent-0 (pid \(pid)) exited on its own: killed by signal 9 (SIGKILL)", "\(crash.message)")
        #expect(crash.evidence.last == "the last line")
        runner.exits.reported(pid)
        #expect(runner.exits.unreportedCrash(pid) == nil, "reported once")
        // A record that does not say it exited is no crash (yet).
        record.condition = .answering(.init(state: "ready", controlledClock: true))
        #expect(SoakRunner.crash(agent: 0, pid: pid, at: died, record: record, log: []) == nil)
        // An end the runner asked for is no crash either.
        let expected = ExitWatch()
        expected.expect(pid)
        #expect(expected.unreportedCrash(pid) == nil)
        sleeper.waitUntilExit()
    }

    @Test func aCrashIsDrawnWithTheLanesEndOrItsRestart() throws {
        var lane = TimelineLane(title: "agent 0", id: "lane-0")
        lane.readies = [10, 500]
        lane.crashes = [300, 800]
        lane.tracked = [(20, .on), (700, .on)]
        lane.ages = [(20, 5), (700, 20)]
        lane.refreshes = [RefreshMark(time: 15, succeeded: true), RefreshMark(time: 600, succeeded: true)]
        lane.background = [(900, nil)]
        #expect(lane.afterCrashes.map(\.up) == [500, nil])
        #expect(lane.deadFrom == 800)
        let data = TimelineData(title: "t", start: 0, end: 2_000, lifetime: 86_400, refreshInterval: 3_600, trackedFlag: "new_checkout",
                                lanes: [lane], clock: "device time")
        let (ok, counter, _) = parseXML(Data(TimelineSVG.render(data).utf8))
        #expect(ok)
        let titles = counter.titles
        #expect(titles.contains { $0.hasPrefix("crash: the process exited on its own at 1970-01-01T00:05:00.000Z") })
        #expect(titles.contains { $0.hasPrefix("down after the crash at 1970-01-01T00:05:00.000Z: restarted: READY=1 at 1970-01-01T00:08:20.000Z") })
        #expect(titles.contains { $0.hasPrefix("down after the crash at 1970-01-01T00:13:20.000Z: not restarted") })
        #expect(counter.texts.contains("not restarted"))
        // Not drawn as serving past its death: the band ends at 800, not at the run's end.
        #expect(titles.contains { $0.hasPrefix("new_checkout on from 1970-01-01T00:00:20.000Z to 1970-01-01T00:13:20.000Z") }, "\(titles)")
        #expect(!titles.contains { $0.contains("to 1970-01-01T00:33:20.000Z") && $0.hasPrefix("new_checkout") })
        #expect(!titles.contains { $0.hasPrefix("background from 1970-01-01T00:15:00") }, "a background that starts after its death is not drawn")
        // The cache age stops at the death: no point past x(800).
        let svg = TimelineSVG.render(data)
        let maxX = TimelineSVG.Canvas(d: data, height: 0).x(800)
        for line in counter.elements where line.name == "polyline" {
            let xs = (line.attributes["points"] ?? "").split(separator: " ").compactMap { Double($0.split(separator: ",")[0]) }
            #expect(xs.allSatisfy { $0 <= maxX + 0.05 }, "\(xs) past \(maxX)")
        }
        #expect(svg.contains("polyline"))
    }
}
