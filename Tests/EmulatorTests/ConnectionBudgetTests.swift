import AgentPosix
@testable import Emulator
import Foundation
import Glibc
import HarnessSupport
import Testing

/// docs/emulator.md D.5: connections that send nothing (plain, or TLS handshakes never
/// finished) cannot keep the admin API or the device API from being served, and a quiet
/// connection is closed after `--idle-timeout`; parked waits are neither closed for newer
/// connections nor timed out as idle.
@Suite(.serialized) struct ConnectionBudgetTests {
    static let clock = "GET /admin/clock HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"

    /// The attack as measured: 4,200 connections that send nothing (fewer where the
    /// open-files limit is lower, always more than the server's limit).
    @Test func thousandsOfIdleConnectionsNeverBlockTheAdminOrTheDeviceAPI() async throws {
        let files = EmulatorCommand.raiseOpenFilesLimit(toFit: 2 * 4200 + 256)
        let idle = min(4200, (files - 400) / 2)
        let limit = min(4096, idle - 104)
        try #require(limit >= 16, "open-files limit \(files) too low for the test")
        let server = try EmulatorServer(listen: "127.0.0.1:0", threads: 2, connectionLimit: limit)
        let port = try server.start()
        defer { server.stop() }
        let held = try await offPool { try (0..<idle).map { _ in try RawSocket(port: port) } }
        let started = monotonicSeconds()
        let answer = try await offPool { try RawSocket.answer(port: port, Self.clock, timeout: 1) }
        let took = monotonicSeconds() - started
        #expect(answer.status == 200, "GET /admin/clock under \(idle) idle connections (limit \(limit)): \(answer.end)")
        #expect(took < 1, "\(took) s")
        let device = try await offPool { () throws -> RawSocket.Answer in
            let s = try RawSocket(port: port)
            s.device("getFeatureFlags", hwid: "h1")
            return s.read(timeout: 1)
        }
        #expect(device.status != nil, "device API call under \(idle) idle connections: \(device.end)")
        #expect(server.connectionsClosedForNewer >= idle - limit)
        // The ones closed for newer ones are gone once libmicrohttpd has seen their end.
        let settled = monotonicSeconds()
        while server.openConnections > limit + 1, monotonicSeconds() - settled < 2 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(server.openConnections <= limit + 1)
        withExtendedLifetime(held) {}
    }

    @Test func tlsHandshakesNeverFinishedDoNotBlockHTTPS() async throws {
        let dir = TempDir()
        let cert = dir.file("c.pem"), key = dir.file("k.pem")
        let made = try runCapturing("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                                         "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1"])
        try #require(made.status == 0, "\(made.err)")
        let server = try EmulatorServer(listen: "127.0.0.1:0", threads: 2, connectionLimit: 16,
                                        tls: try TLSIdentity.load(certificate: cert, key: key))
        let port = try server.start()
        defer { server.stop() }
        // 200 half-handshakes: the first bytes of a ClientHello record, then nothing.
        let held = try await offPool {
            try (0..<200).map { _ in
                let s = try RawSocket(port: port)
                s.send("\u{16}\u{03}\u{01}\u{02}")
                return s
            }
        }
        let run = try await offPool {
            try runCapturing("/usr/bin/curl", ["-sS", "--max-time", "2", "--cacert", cert, "-o", "/dev/null", "-w", "%{http_code} %{time_total}",
                                               "https://127.0.0.1:\(port)/admin/clock"])
        }
        let fields = run.out.split(separator: " ")
        #expect(fields.first == "200", "HTTPS GET /admin/clock under 200 half-handshakes: \(run.out) \(run.err)")
        #expect((fields.last.flatMap { Double($0) } ?? 9) < 1, "\(run.out)")
        withExtendedLifetime(held) {}
    }

    @Test func aQuietConnectionIsClosedAfterTheIdleTimeoutAndAParkedWaitIsNot() async throws {
        let server = try EmulatorServer(listen: "127.0.0.1:0", threads: 2, idleTimeout: 1)
        let port = try server.start()
        defer { server.stop() }
        let started = monotonicSeconds()
        let silent = try RawSocket(port: port)
        let dripping = try RawSocket(port: port)
        dripping.send("GET /admin/clock HTTP/1.1\r\nHost: 127.0.0.1\r\n")  // and never the end of the headers
        let waiter = try RawSocket(port: port)
        waiter.request("GET", "/admin/requests/wait?hwid=nobody&timeout=2.5")
        let ends = try await offPool { readAll([silent, dripping, waiter], timeout: 10) }
        let seconds = ends.map { Double($0.1) / 1e9 - started }
        #expect(ends[0].0.end == .eof && ends[1].0.end == .eof, "\(ends.map(\.0.end))")
        #expect(seconds[0] < 4 && seconds[1] < 4, "closed after \(seconds) s (idle timeout 1 s)")
        // The parked wait is answered at its own timeout (408), not cut at the idle timeout.
        #expect(ends[2].0.status == 408, "\(ends[2].0.end) \(ends[2].0.text)")
        #expect(seconds[2] >= 2.4, "\(seconds[2]) s")
    }

    @Test func aParkedWaitIsNeverClosedForANewerConnection() async throws {
        let server = try EmulatorServer(listen: "127.0.0.1:0", threads: 2, connectionLimit: 16)
        let port = try server.start()
        defer { server.stop() }
        let waiters = try (0..<8).map { _ in
            let s = try RawSocket(port: port)
            s.request("GET", "/admin/requests/wait?hwid=h9&timeout=20")
            return s
        }
        try await parked(server, 8)
        let held = try await offPool { try (0..<100).map { _ in try RawSocket(port: port) } }
        #expect(try await offPool { try RawSocket.answer(port: port, Self.clock, timeout: 1) }.status == 200)
        #expect(server.parkedWaits == 8)
        let device = try await offPool { () throws -> RawSocket.Answer in
            let s = try RawSocket(port: port)
            s.device("getFeatureFlags", hwid: "h9")
            return s.read(timeout: 2)
        }
        #expect(device.status != nil)
        let answers = try await offPool { readAll(waiters, timeout: 5) }
        #expect(answers.allSatisfy { $0.0.status == 200 }, "\(answers.map(\.0.end))")
        withExtendedLifetime(held) {}
    }

    @Test func budgetsParse() throws {
        let o = try EmulatorCommand.parse(["--idle-timeout", "5", "--max-connections=100"])
        #expect(o.idleTimeout == 5 && o.maxConnections == 100)
        #expect(try EmulatorCommand.parse([]).idleTimeout == 30)
    }
}

/// The budget's bookkeeping on its own, with socket pairs standing for connections.
@Suite struct ConnectionBudgetBookkeepingTests {
    @Test func pastTheLimitTheOldestIdleIsClosedNeverABusyOne() throws {
        let budget = ConnectionBudget(limit: 16, log: nil)
        var peers: [UInt: Int32] = [:]
        func open(_ key: UInt) {
            var pair: [Int32] = [0, 0]
            #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
            peers[key] = pair[1]
            budget.opened(key, fd: pair[0])
        }
        func closedByBudget(_ key: UInt) -> Bool {
            var p = pollfd(fd: peers[key]!, events: Int16(POLLIN), revents: 0)
            return poll(&p, 1, 0) == 1  // the peer sees the end (EOF)
        }
        for key in UInt(1)...16 { open(key) }
        for key in UInt(1)...8 { budget.busy(key) }
        open(17)
        #expect(closedByBudget(9) && budget.closedForNewer == 1)
        #expect((UInt(1)...8).allSatisfy { !closedByBudget($0) })
        budget.closed(9)
        budget.idle(1)  // its answer is out: the newest idle one
        open(18)
        #expect(closedByBudget(10) && !closedByBudget(1))
        budget.closed(10)
        // A kept-alive connection's requests do not grow the queue without bound.
        for _ in 0..<10_000 {
            budget.busy(2)
            budget.idle(2)
        }
        #expect(budget.queued <= 4 * 64 + 1, "\(budget.queued)")
        #expect(budget.count == 16)
    }
}
