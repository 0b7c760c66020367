import AgentCore
import Emulator
import EmulatorCore
import Foundation
import Glibc
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
import HarnessSupport
#endif

/// Waits (polling the server's own count, with a deadline) until `n` waits are parked.
func parked(_ server: EmulatorServer, _ n: Int, within seconds: Double = 20) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + .milliseconds(Int(seconds * 1000))
    while server.parkedWaits != n {
        guard clock.now < deadline else {
            Issue.record("\(server.parkedWaits) waits parked, expected \(n)")
            return
        }
        try await Task.sleep(for: .milliseconds(2))
    }
}

@Suite struct LabHTTPTests {
    @Test func aLongPollIsAnsweredByAnotherConnectionWhileAThirdIsServed() async throws {
        try await withServer(threads: 1) { (server, client) async throws in
            let waiter = Client(port: client.port)
            async let waited = waiter.send("GET", "/admin/requests/wait?hwid=h7&method=getFeatureFlags&timeout=20")
            try await parked(server, 1)
            // A third client is served while the wait is parked (one server thread).
            let third = Client(port: client.port)
            #expect(try await third.send("GET", "/admin/apps").status == 200)
            #expect(try await third.device("getFeatureFlags", hwid: "h1").status == 200)
            #expect(server.parkedWaits == 1)
            // The device call from another connection answers it.
            #expect(try await client.device("getFeatureFlags", hwid: "h7").status == 200)
            let answer = try await waited
            #expect(answer.status == 200)
            #expect(answer.json?["count"] == 1)
            #expect(answer.json?["requests"]?.arrayValue?.first?["hwid"] == "h7")
            #expect(server.parkedWaits == 0)
        }
    }

    @Test func aLongPollTimesOutWith408AndWhatArrived() async throws {
        try await withServer { (server, client) async throws in
            #expect(try await client.device("getFeatureFlags", hwid: "h7").status == 200)
            let clock = ContinuousClock()
            let start = clock.now
            let answer = try await client.send("GET", "/admin/requests/wait?hwid=h7&count=2&timeout=0.3")
            let took = clock.now - start
            #expect(answer.status == 408)
            #expect(answer.json?["count"] == 1)
            #expect(took >= .milliseconds(300) && took < .seconds(5), "\(took)")
            #expect(server.parkedWaits == 0)
            let bad = try await client.send("GET", "/admin/requests/wait?timeout=301")
            #expect(bad.status == 400 && bad.json?["path"] == "timeout")
            let typo = try await client.send("GET", "/admin/requests?metod=getFeatureFlags")
            #expect(typo.status == 400 && typo.json?["path"] == "metod")
            #expect(try await client.send("GET", "/admin/requests/count?hwid=h7").json == ["count": 1])
        }
    }

    @Test func truncateStallAndResetSeenByARawClient() async throws {
        try await withServer(threads: 1) { (server, client) async throws in
            try await client.arm(["method": "getFeatureFlags", "hwid": "h7", "truncateAfterBytes": 10])
            let truncated = try await offPool {
                let s = try RawSocket(port: client.port)
                s.device("getFeatureFlags", hwid: "h7")
                return s.read(timeout: 5)
            }
            #expect(truncated.status == 200)
            #expect(truncated.end == .eof)
            #expect(truncated.body.count == 10 && (truncated.contentLength ?? 0) > 10, "\(truncated.text)")

            try await client.arm(["method": "getFeatureFlags", "hwid": "h7", "stallAfterHeaders": true])
            let stalled = try RawSocket(port: client.port)
            stalled.device("getFeatureFlags", hwid: "h7")
            // Headers arrive; then nothing, and the one server thread still serves others meanwhile.
            let head = try await offPool { stalled.read(timeout: 1) }
            #expect(head.status == 200 && head.headerEnd != nil && head.body.isEmpty && head.end == .timeout, "\(head.text)")
            #expect(try await client.device("getFeatureFlags", hwid: "h1").status == 200)
            let still = try await offPool { stalled.read(timeout: 0.3) }
            #expect(still.bytes.isEmpty && still.end == .timeout)

            try await client.arm(["method": "getFeatureFlags", "hwid": "h7", "reset": true])
            let reset = try await offPool {
                let s = try RawSocket(port: client.port)
                s.device("getFeatureFlags", hwid: "h7")
                return s.read(timeout: 5)
            }
            #expect(reset.end == .reset && reset.bytes.isEmpty, "\(reset.end) \(reset.text)")
            let recorded = try await client.send("GET", "/admin/requests?hwid=h7").json?["requests"]?.arrayValue
            #expect(recorded?.map { $0["fault"] } == ["truncateAfterBytes", "stallAfterHeaders", "reset"])
            _ = server
        }
    }

    @Test func scopedFaultsClockResetAndStateOverHTTP() async throws {
        try await withServer { (_, client) async throws in
            try await client.arm(["method": "getFeatureFlags", "hwid": "h7", "forSeconds": 7200, "http": 503])
            for _ in 0..<3 {
                #expect(try await client.device("getFeatureFlags", hwid: "h1").status == 200)
                #expect(try await client.device("getFeatureFlags", hwid: "h7").status == 503)
            }
            #expect(try await client.send("GET", "/admin/requests/count?hwid=h1&method=getFeatureFlags").json == ["count": 3])
            let faults = try await client.send("GET", "/admin/faults").json?["faults"]?.arrayValue
            #expect(faults?.first?["remaining"] == .null && faults?.first?["until"]?.stringValue != nil)
            #expect(try await client.send("POST", "/admin/clock", json: ["advanceSeconds": 7200]).status == 200)
            #expect(try await client.device("getFeatureFlags", hwid: "h7").status == 200)
            let saved = try #require(try await client.send("GET", "/admin/state").json)
            #expect((saved["clockOffsetSeconds"]?.numberValue ?? 0) >= 7200)
            #expect(try await client.send("POST", "/admin/reset").json == ["reset": true])
            #expect(try await client.send("GET", "/admin/clock").json?["offsetSeconds"] == 0)
            #expect(try await client.send("GET", "/admin/devices").json?["devices"] == [])
            #expect(try await client.send("PUT", "/admin/state", json: saved).status == 200)
            #expect(try await client.send("GET", "/admin/devices").json?["devices"]?.arrayValue?.count == 2)
            let bad = try await client.send("PUT", "/admin/state", json: ["version": 1, "clockOffsetSeconds": 0, "apps": [], "devices": "none"])
            #expect(bad.status == 400 && bad.json?["path"] == "devices")
        }
    }

    /// 1,000 parked long polls: device calls keep being answered; prints the figures.
    @Test func aThousandParkedWaitsDoNotStopDeviceCalls() async throws {
        EmulatorCommand.raiseOpenFilesLimit(toFit: 4096)
        try await withServer(threads: 2) { (server, client) async throws in
            let port = client.port
            let calls = 1000
            /// `calls` sequential device calls on one keep-alive connection: calls per second.
            @Sendable func throughput(_ hwid: String) throws -> Double {
                let s = try RawSocket(port: port)
                let start = DispatchTime.now().uptimeNanoseconds
                for _ in 0..<calls {
                    s.device("getFeatureFlags", hwid: hwid, close: false)
                    let a = s.read(timeout: 10)
                    guard a.status == 200, a.end == .complete else { throw POSIXError(.EPROTO) }
                }
                return Double(calls) / (Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
            }
            let baseline = try await offPool { try throughput("worker") }

            let waiters = try await offPool {
                try (0..<1000).map { _ in
                    let s = try RawSocket(port: port)
                    s.request("GET", "/admin/requests/wait?hwid=crowd&timeout=120")
                    return s
                }
            }
            try await parked(server, 1000)
            let withParked = try await offPool { try throughput("worker") }
            #expect(server.parkedWaits == 1000)

            // Wake-up latency: a wait on its own HWID, answered by a device call on another connection.
            var latencies: [Double] = []
            for round in 0..<20 {
                let w = try RawSocket(port: port)
                w.request("GET", "/admin/requests/wait?hwid=wake-\(round)&timeout=30")
                try await parked(server, 1001)
                let t = try await offPool { () throws -> Double in
                    let d = try RawSocket(port: port)
                    let start = DispatchTime.now().uptimeNanoseconds
                    d.device("getFeatureFlags", hwid: "wake-\(round)")
                    let a = w.read(timeout: 10)
                    guard a.status == 200 else { throw POSIXError(.EPROTO) }
                    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
                }
                latencies.append(t)
            }
            latencies.sort()

            // One call wakes all 1,000.
            let fanOut = try await offPool { () throws -> (Double, Int) in
                let d = try RawSocket(port: port)
                let start = DispatchTime.now().uptimeNanoseconds
                d.device("getFeatureFlags", hwid: "crowd")
                let answers = readAll(waiters, timeout: 30)
                let last = answers.map(\.1).max() ?? start
                return (Double(last - start) / 1e6, answers.filter { $0.0.status == 200 && $0.0.end == .complete }.count)
            }
            print("""
                emulator lab figures (debug build, \(server.threads) server threads, \(calls) sequential device calls on one keep-alive connection):
                  device calls/s with no parked waits:    \(Int(baseline))
                  device calls/s with 1,000 parked waits: \(Int(withParked))
                  wake-up latency (device call sent -> wait answered), 20 rounds: median \(String(format: "%.2f", latencies[10])) ms, max \(String(format: "%.2f", latencies[19])) ms
                  one device call waking 1,000 parked waits: all answered in \(String(format: "%.1f", fanOut.0)) ms
                """)
            #expect(fanOut.1 == 1000)
            #expect(server.parkedWaits == 0)
            #expect(latencies[19] < 1000)
            #expect(withParked > baseline / 10, "throughput fell from \(baseline) to \(withParked) calls/s")
        }
    }
}

@Suite struct LabStopTests {
    @Test func stopWhileWaitsAndAStallAreParked() async throws {
        let server = try EmulatorServer(listen: "127.0.0.1:0", apps: EmulatorCommand.loadApps(path: exampleFile))
        let port = try server.start()
        let client = Client(port: port)
        try await client.arm(["method": "getFeatureFlags", "stallAfterHeaders": true])
        let stalled = try RawSocket(port: port)
        stalled.device("getFeatureFlags", hwid: "h1")
        let waiters = try (0..<3).map { _ in
            let s = try RawSocket(port: port)
            s.request("GET", "/admin/requests/wait?hwid=nobody&timeout=60")
            return s
        }
        try await parked(server, 3)
        let clock = ContinuousClock()
        let start = clock.now
        server.stop()
        #expect(clock.now - start < .seconds(2))
        #expect(server.parkedWaits == 0)
        let cut = try await offPool { readAll(waiters + [stalled], timeout: 5) }
        // Closed unanswered (the stalled one after its headers), none left hanging.
        #expect(cut.allSatisfy { ($0.0.end == .eof || $0.0.end == .reset) && !$0.0.complete }, "\(cut.map(\.0.end))")
        #expect(clock.now - start < .seconds(5))
    }
}

@Suite struct StateFileTests {
    @Test func stateFileLoadsAndErrorsNameTheFileAndField() throws {
        let dir = TempDir()
        let good = dir.file("lab.json")
        try Data(#"{"version": 1, "clockOffsetSeconds": 60, "apps": [{"code": "A"}], "devices": [{"hwid": "h1", "userId": "alice"}]}"#.utf8)
            .write(to: URL(fileURLWithPath: good))
        let doc = try EmulatorCommand.loadState(path: good)
        #expect(doc.apps.map(\.code) == ["A"] && doc.devices.map(\.userId) == ["alice"] && doc.clockOffset == 60)
        let server = try EmulatorServer(listen: "127.0.0.1:0", initialState: doc)
        #expect(server.withState { $0.devices["h1"]?.userId } == "alice")
        #expect(server.withState { $0.clockOffset } == 60)

        let bad = dir.file("bad.json")
        try Data(#"{"version": 1, "clockOffsetSeconds": 0, "apps": [], "devices": [{"hwid": "h1", "events": [{"event": "e"}]}]}"#.utf8)
            .write(to: URL(fileURLWithPath: bad))
        #expect(throws: EmulatorServerError(description: "\(bad): devices[0].events[0].time: missing (expected an ISO 8601 time)")) {
            try EmulatorCommand.loadState(path: bad)
        }
        let partial = dir.file("partial.json")
        try Data(#"{"version": 1, "apps": [{"code": "A"}]}"#.utf8).write(to: URL(fileURLWithPath: partial))
        #expect(throws: EmulatorServerError(description: "\(partial): clockOffsetSeconds: missing (a state document has every section: "
                                                  + "version, clockOffsetSeconds, apps, devices; GET /admin/state gives one)")) {
            try EmulatorCommand.loadState(path: partial)
        }
        #expect(throws: EmulatorServerError(description: "\(bad).missing: cannot read the file (No such file or directory)")) {
            try EmulatorCommand.loadState(path: bad + ".missing")
        }
        // Not a file: refused at once, never read without end (/dev/zero) or waited on (a FIFO).
        let fifo = dir.file("apps-fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(errorWithin2Seconds(unblocking: fifo) { _ = try EmulatorCommand.loadApps(path: fifo) }
                == "\(fifo): not a regular file (a FIFO)")
        #expect(errorWithin2Seconds(unblocking: fifo) { _ = try EmulatorCommand.loadRecording(path: fifo) }
                == "--replay: \(fifo): not a regular file (a FIFO)")
        #expect(throws: EmulatorServerError(description: "/dev/zero: not a regular file (a character device)")) {
            try EmulatorCommand.loadState(path: "/dev/zero")
        }
        #expect(try EmulatorCommand.parse(["--state", good]).stateFile == good)
        #expect(try EmulatorCommand.parse(["--max-connections", "2000"]).maxConnections == 2000)
    }
}
