@testable import AgentPosix
import Dispatch
import Glibc
import Testing
import HarnessSupport

/// Starts a listener on the loop thread whose connections `configure` sets
/// up; records how each connection closed.
/// A loop thread serving connections on a Unix socket in a temporary directory, and how
/// each connection closed.
private final class Served: Sendable {
    let dir = TempDir()
    let thread: LoopThread
    let closes = Shared<[Connection.CloseReason]>([])
    var path: String { dir.file("s") }

    init(clock: any LoopClock = SystemLoopClock.shared) throws { thread = try LoopThread(clock: clock) }

    /// Listens at `path`; every accepted connection is configured, then started.
    func start(maxPendingOutput: Int = 8 << 20, configure: @escaping @Sendable (Connection) -> Void) throws {
        let path = self.path
        let closes = self.closes
        try thread.sync { loop, box in
            let listener = try UnixListener(path: path)
            try listener.start(on: loop) { descriptor in
                let connection = Connection(loop: loop, descriptor: descriptor, maxPendingOutput: maxPendingOutput)
                connection.onClose = { reason in closes.update { $0.append(reason) } }
                configure(connection)
                try? connection.start()
            }
            box.objects.append(listener)
        }
    }

    func stop() { thread.stop() }
}

/// Echoes every chunk back as it came.
private let echo: @Sendable (Connection) -> Void = { connection in
    connection.onInput = { [unowned connection] bytes in connection.send(bytes) }
}

@Suite struct ConnectionTests {
    /// A connection holds an output buffer only while it has output waiting: 200 clients, each
    /// answered, leave the loop at most one buffer per event of an `epoll_wait`, none over 4 KiB
    /// (a 10 KiB echo's buffer is freed, not kept).
    @Test func connectionsHoldNoOutputBufferBetweenAnswers() throws {
        let served = try Served()
        defer { served.stop() }
        try served.start(configure: echo)
        var fds: [Int32] = []
        defer { for fd in fds { Glibc.close(fd) } }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        for _ in 0..<200 {
            let fd = try UnixSocket.connect(to: served.path).take()
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            fds.append(fd)
        }
        func exchange(_ fd: Int32, _ bytes: [UInt8]) -> Int {
            _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            var got = 0
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while got < bytes.count {
                let n = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
                guard n > 0 else { break }
                got += n
            }
            return got
        }
        // One client at a time: the one buffer went from connection to connection.
        for fd in fds { #expect(exchange(fd, Array("ping\n".utf8)) == 5) }
        #expect(try served.thread.sync { loop, _ in loop.outputBuffers.count } == 1)
        // The 10 KiB answer's buffer is freed, not kept.
        #expect(exchange(fds[0], [UInt8](repeating: UInt8(ascii: "x"), count: 10 * 1024)) == 10 * 1024)
        #expect(try served.thread.sync { loop, _ in loop.outputBuffers.count } == 0)
        // All at once: at most as many buffers as an `epoll_wait` gives events, none over 4 KiB.
        for fd in fds { _ = Glibc.send(fd, "ping\n", 5, Int32(MSG_NOSIGNAL)) }
        for fd in fds { #expect(exchange(fd, []) == 0 && recvAll(fd, 5) == 5) }
        let kept = try served.thread.sync { loop, _ in loop.outputBuffers.map(\.capacity) }
        #expect(!kept.isEmpty && kept.count <= 128, "buffers kept: \(kept.count)")
        #expect(kept.allSatisfy { $0 <= 4 * 1024 }, "capacities: \(kept)")
        func recvAll(_ fd: Int32, _ count: Int) -> Int {
            var got = 0
            var buffer = [UInt8](repeating: 0, count: 64)
            while got < count {
                let n = buffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, count - got, 0) }
                guard n > 0 else { break }
                got += n
            }
            return got
        }
    }

    @Test func manyMessagesInOneReadAreAnsweredInOneSend() throws {
        let served = try Served()
        defer { served.stop() }
        let sends = Shared<[Int]>([])
        try served.start { connection in
            connection.onInput = { [unowned connection] bytes in
                // One answer per line, queued separately.
                for line in bytes.split(separator: UInt8(ascii: "\n")) {
                    connection.send(Array("ok:".utf8) + line + [UInt8(ascii: "\n")])
                }
                connection.loop.deferToEndOfIteration {
                    connection.loop.deferToEndOfIteration { sends.update { $0.append(connection.sendSyscalls) } }
                }
            }
        }
        let client = try TestClient(path: served.path)
        let request = (0..<100).map { "m\($0)\n" }.joined()
        try client.write(request)
        let expected = (0..<100).map { "ok:m\($0)\n" }.joined()
        #expect(client.readString(count: expected.utf8.count) == expected)
        #expect(waitUntil { !sends.value.isEmpty })
        #expect(sends.value.last == 1)
    }

    @Test func largeVolumeFlowsBothWays() throws {
        let served = try Served()
        defer { served.stop() }
        try served.start(configure: echo)
        let client = try TestClient(path: served.path)
        let lines = (0..<20_000).map { "line number \($0) of the volume test\n" }.joined()
        let bytes = Array(lines.utf8)
        let writer = DispatchSemaphore(value: 0)
        let fd = client.fd
        DispatchQueue.global().async {
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, min(4096, bytes.count - offset), Int32(MSG_NOSIGNAL)) }
                if n <= 0 { break }
                offset += n
            }
            writer.signal()
        }
        let received = client.read(count: bytes.count)
        writer.wait()
        #expect(received.count == bytes.count)
        #expect(received == bytes)
        #expect(served.closes.value.isEmpty)
    }

    @Test func halfClosedClientGetsItsAnswersThenTheConnectionCloses() throws {
        let served = try Served()
        defer { served.stop() }
        try served.start(configure: echo)
        let client = try TestClient(path: served.path)
        try client.write("a\nb\n")
        client.shutdownWrite()
        #expect(client.readString(count: 100) == "a\nb\n")  // then EOF
        #expect(client.readOnce() == 0)
        #expect(waitUntil { served.closes.value == [.eof] })
    }

    @Test func ownerCanHoldAHalfClosedConnectionForLateAnswers() throws {
        let served = try Served()
        defer { served.stop() }
        try served.start { connection in
            connection.onReadEOF = { [unowned connection] in
                // An answer that needed the network arrives later.
                connection.loop.schedule(after: 0.05) {
                    connection.send(Array("late\n".utf8))
                    connection.closeAfterFlush()
                }
            }
        }
        let client = try TestClient(path: served.path)
        try client.write("refresh\n")
        client.shutdownWrite()
        #expect(client.readString(count: 100) == "late\n")
        #expect(waitUntil { served.closes.value == [.eof] })
    }

    @Test func vanishedClientIsClosedWithoutDisturbingTheLoop() throws {
        let served = try Served()
        defer { served.stop() }
        try served.start(configure: echo)
        do {
            let client = try TestClient(path: served.path)
            try client.write("bye\n")
        }  // closed without reading the echo
        #expect(waitUntil { served.closes.value.count == 1 })
        // The loop still serves.
        let other = try TestClient(path: served.path)
        try other.write("still here\n")
        #expect(other.readString(count: 11) == "still here\n")
    }

    @Test func slowReaderIsClosedWhenItsBacklogExceedsTheLimit() throws {
        let served = try Served()
        defer { served.stop() }
        let peak = Shared(0)
        try served.start(maxPendingOutput: 1 << 20) { connection in
            let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 64 * 1024)
            connection.onInput = { [weak connection] _ in
                // A flood of answers the client never reads, 64 KiB per ms.
                func pump() {
                    // Once closed, the connection is released: hold it weakly.
                    guard let connection, connection.isOpen else { return }
                    connection.send(chunk)
                    peak.update { $0 = max($0, connection.pendingOutputBytes) }
                    connection.loop.schedule(after: 0.001, pump)
                }
                pump()
            }
        }
        let client = try TestClient(path: served.path)
        try client.write("go\n")
        #expect(waitUntil { served.closes.value == [.backpressure] })
        #expect(peak.value <= (1 << 20) + 64 * 1024)
    }

    @Test func idleConnectionIsClosedAndActivityKeepsItOpen() throws {
        let clock = ManualLoopClock()
        let served = try Served(clock: clock)
        defer { served.stop() }
        try served.start { connection in
            echo(connection)
            connection.setIdleTimeout(0.15)
        }
        let idle = try TestClient(path: served.path)
        let busy = try TestClient(path: served.path)
        try served.thread.sync { _, _ in }  // both accepted, their idle timers armed
        let start = clock.now
        var idleClosedBy: Double?
        // The busy client talks every 50 ms (virtual) for 400 ms.
        for _ in 0..<8 {
            try busy.write("ping\n")
            #expect(busy.readString(count: 5) == "ping\n")
            try served.thread.advance(clock, by: 0.05)
            if idleClosedBy == nil, !served.closes.value.isEmpty { idleClosedBy = clock.now - start }
        }
        #expect(served.closes.value == [.idleTimeout])
        #expect(idle.readOnce() == 0)  // the idle one saw EOF
        #expect(try #require(idleClosedBy) >= 0.15)
        // Silent from now on: the busy one goes too.
        try served.thread.advance(clock, by: 0.15)
        #expect(waitUntil(timeout: 2) { served.closes.value == [.idleTimeout, .idleTimeout] })
        #expect(busy.readOnce() == 0)
    }

    @Test func localCloseDropsPendingOutputAndReportsLocal() throws {
        let served = try Served()
        defer { served.stop() }
        try served.start { connection in
            connection.onInput = { [unowned connection] _ in
                connection.send(Array("never sent\n".utf8))
                connection.close()
                connection.send(Array("ignored\n".utf8))
            }
        }
        let client = try TestClient(path: served.path)
        try client.write("x\n")
        #expect(client.readOnce() == 0)
        #expect(waitUntil { served.closes.value == [.local] })
    }

    @Test func twoHundredFiftySixConcurrentClientsEcho() throws {
        let served = try Served()
        defer { served.stop() }
        try served.start(configure: echo)
        let path = served.path
        let failures = Shared(0)
        // 8 threads × 32 clients, all connected at once, each with 10 round trips.
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            do {
                var clients: [Int32] = []
                for _ in 0..<32 { clients.append(try UnixSocket.connect(to: path).take()) }
                defer { clients.forEach { close($0) } }
                for round in 0..<10 {
                    for (index, fd) in clients.enumerated() {
                        let message = Array("w\(worker) c\(index) r\(round)\n".utf8)
                        guard send(fd, message, message.count, Int32(MSG_NOSIGNAL)) == message.count else {
                            failures.update { $0 += 1 }
                            continue
                        }
                    }
                    for (index, fd) in clients.enumerated() {
                        let expected = Array("w\(worker) c\(index) r\(round)\n".utf8)
                        var buffer = [UInt8](repeating: 0, count: expected.count)
                        var got = 0
                        while got < expected.count {
                            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + got, expected.count - got, 0) }
                            if n <= 0 { break }
                            got += n
                        }
                        if buffer != expected { failures.update { $0 += 1 } }
                    }
                }
            } catch {
                failures.update { $0 += 1000 }
            }
        }
        #expect(failures.value == 0)
        #expect(waitUntil { served.closes.value.count == 256 })
    }
}

@Suite struct EchoServerTests {
    @Test func echoesCompleteLinesAcrossReads() throws {
        let dir = TempDir()
        let thread = try LoopThread()
        defer { thread.stop() }
        let path = dir.file("echo.sock")
        try thread.sync { loop, box in
            let server = try EchoServer(loop: loop, path: path)
            try server.start()
            box.objects.append(server)
        }
        let client = try TestClient(path: path)
        try client.write("hel")
        usleep(20_000)  // real time on purpose: the pieces must reach the server in separate reads
        try client.write("lo\nwor")
        #expect(client.readString(count: 6) == "hello\n")
        usleep(20_000)  // as above: a separate read
        try client.write("ld\n{\"id\":1}\n")
        #expect(client.readString(count: 15) == "world\n{\"id\":1}\n")
        client.shutdownWrite()
        #expect(client.readOnce() == 0)
    }
}
