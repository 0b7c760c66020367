import AgentCore
import AgentCurl
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing

/// The real transport (libcurl's multi interface on the agent's event loop) against the
/// real emulator and against small raw TCP servers that misbehave on purpose. Each test
/// runs the loop on its own thread until the answers are in.
@Suite(.serialized) struct CurlTransportTests {
    /// Sends `requests` one after another (each after the previous answer) on a fresh loop
    /// and transport; returns the outcomes and how many requests were left in flight.
    func exchange(_ requests: [HTTPRequest], maximumBodyBytes: Int = CurlTransport.defaultMaximumBodyBytes,
                  bound: Double = 20) throws -> [HTTPOutcome] {
        let loop = try EventLoop()
        let transport = CurlTransport(loop: loop, userAgent: "pushwoosh-agentd/test", maximumBodyBytes: maximumBodyBytes)
        var outcomes: [HTTPOutcome] = []
        var sentInsideSend = false
        func next() {
            guard outcomes.count < requests.count else { loop.stop(); return }
            var returned = false
            transport.send(requests[outcomes.count]) { outcome in
                if !returned { sentInsideSend = true }
                outcomes.append(outcome)
                next()
            }
            returned = true
        }
        next()
        let guardTimer = loop.schedule(after: bound) { loop.stop() }
        try loop.run()
        loop.cancel(guardTimer)
        #expect(!sentInsideSend, "a completion ran inside send")
        #expect(outcomes.count == requests.count, "the loop stopped before every answer came")
        #expect(transport.inFlight == 0)
        return outcomes
    }

    func request(_ method: PushwooshAPI.Method = .getFeatureFlags, to baseURL: String, token: String? = nil,
                 retryCount: Int = 0, timeout: Double = 5) -> HTTPRequest {
        PushwooshAPI.request(method, baseURL: baseURL,
                             common: .init(applicationCode: "ABCDE-12345", hwid: "HWID-1", userId: "alice"),
                             apiToken: token, retryCount: retryCount, timeout: timeout)
    }

    func failure(_ outcome: HTTPOutcome) -> PushwooshAPI.Failure? {
        if case .failure(let f) = PushwooshAPI.classify(outcome) { return f }
        return nil
    }

    func reason(_ outcome: HTTPOutcome) -> String {
        if case .noResponse(let reason) = outcome { return reason }
        return "a response"
    }

    // A.1, FF-7: flags from the emulator, the request as the server saw it.
    @Test("FF-7: flags fetched from the emulator over libcurl leave the archived flag out")
    func fetchesFlagsFromTheEmulator() throws {
        let tokens = TempDir(files: ["api-token": "t0k\n"])
        let emulator = try EmulatorProcess(arguments: ["--require-token", tokens.file("api-token")])  // a wrong or missing token: 401
        let outcome = try #require(try exchange([request(to: emulator.serverURL, token: "t0k", retryCount: 2)]).first)
        let success = try PushwooshAPI.classify(outcome).get()
        let flags = try PushwooshAPI.parseFlags(success.response).get()
        #expect(flags.flags["new_checkout"] != nil)
        #expect(flags.flags["legacy_onboarding"] == nil)  // archived (FF-7)
        let (_, log) = emulator.admin("GET", "/admin/requests?method=getFeatureFlags")
        #expect(log.contains("\"Authorization\":\"Token [redacted]\""))  // sent, and accepted (200 above)
        #expect(!log.contains("t0k"))  // the log never shows a token
        #expect(log.contains("\"hwid\":\"HWID-1\""))
        #expect(log.contains("7.2.10"))
    }

    // RF-7: a closed port is "no response" (code 0); an HTTP error keeps its status;
    // Retry-After is read; an unusable body is 200; RequestTimeout bounds a slow answer.
    @Test("RF-7: libcurl failures get the SDK's codes: 0 without a response, the HTTP status, 200 for an unusable body")
    func failuresAreClassified() throws {
        let refused = try exchange([request(to: "http://127.0.0.1:1/json/1.3/")])[0]
        #expect(failure(refused)?.code == 0)
        #expect(reason(refused).contains("curl 7"), "\(reason(refused))")  // CURLE_COULDNT_CONNECT
        let emulator = try EmulatorProcess()
        var answers: [HTTPOutcome] = []
        for fault in [#""http":503,"retryAfter":42"#, #""body":"garbage""#, #""drop":true"#] {
            emulator.admin("POST", "/admin/faults", #"{"method":"getFeatureFlags","times":1,"# + fault + "}")
            answers += try exchange([request(to: emulator.serverURL)])
        }
        #expect(failure(answers[0])?.code == 503)
        #expect(failure(answers[0])?.retryAfter == 42)
        #expect(failure(answers[1])?.code == 200)
        #expect(failure(answers[2])?.code == 0)  // closed without an answer
        emulator.admin("POST", "/admin/faults", #"{"method":"getFeatureFlags","times":1,"delayMs":3000}"#)
        let started = monotonicSeconds()
        let slow = try exchange([request(to: emulator.serverURL, timeout: 1)])[0]
        #expect(failure(slow)?.code == 0)
        #expect(reason(slow).contains("curl 28"), "\(reason(slow))")
        #expect(monotonicSeconds() - started < 2.5)
    }

    // A.1: the headers as sent; one connection for several requests; gzip is accepted.
    @Test func headersConnectionReuseAndGzip() throws {
        let server = try RawServer { request, connection in
            // A JSON envelope, gzip-compressed (`printf '%s' '{"status_code":200,"status_message":"OK","response":{}}' | gzip -n`).
            let gzip: [UInt8] = RawServer.gzipEnvelope
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                             + "Content-Length: \(gzip.count)\r\n\r\n", gzip)
            _ = request
            return .keepOpen
        }
        let answers = try exchange([request(to: server.url, token: "abc", retryCount: 3), request(to: server.url)])
        for answer in answers {
            guard case .response(let status, _, let body) = answer else { Issue.record("no response: \(answer)"); continue }
            #expect(status == 200)
            #expect(String(decoding: body, as: UTF8.self).hasPrefix(#"{"status_code":200"#))
        }
        #expect(server.connections == 1, "the second request did not reuse the connection")
        let first = server.requests[0].lowercased()
        #expect(first.hasPrefix("post /json/1.3/getfeatureflags http/1.1"))
        #expect(first.contains("content-type: application/json; charset=utf-8"))
        #expect(first.contains("authorization: token abc"))
        #expect(first.contains("x-retry-count: 3"))
        #expect(first.contains("accept-encoding: "))
        #expect(first.contains("gzip"))
        #expect(first.contains("user-agent: pushwoosh-agentd/test"))
        #expect(!first.contains("expect:"))
        #expect(first.contains(#""hwid":"hwid-1""#))
        #expect(!server.requests[1].lowercased().contains("x-retry-count"))
        #expect(!server.requests[1].lowercased().contains("authorization"))
    }

    // A.1, RF-7: a request is sent once. When the reused connection closes without an answer,
    // libcurl would send it again on a fresh one; the agent sees the failure instead.
    @Test func aDroppedReusedConnectionIsAFailureNotAResend() throws {
        let answered = Counter()
        let server = try RawServer { _, connection in
            guard answered.next() == 1 else { return .close }
            let body = #"{"status_code":200,"status_message":"OK","response":{}}"#
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body, [])
            return .keepOpen
        }
        let answers = try exchange([request(to: server.url), request(to: server.url)])
        guard case .response(200, _, _) = answers[0] else { Issue.record("first: \(answers[0])"); return }
        #expect(failure(answers[1])?.code == 0)
        #expect(reason(answers[1]) == "the server closed the connection without an answer (not sent twice)")
        // (libcurl opens the fresh connection before it asks to rewind: nothing is sent on it.)
        #expect(server.requests.count == 2, "the dropped request was sent again")
    }

    // A reset in the middle of the body, a body over the limit, a server that never answers.
    @Test func brokenServersAreClearErrors() throws {
        let reset = try RawServer { _, connection in
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", Array(#"{"status_code":"#.utf8))
            return .reset
        }
        let resetAnswer = try exchange([request(to: reset.url)])[0]
        #expect(failure(resetAnswer)?.code == 0)
        #expect(reason(resetAnswer).contains("curl 56") || reason(resetAnswer).contains("curl 18"), "\(reason(resetAnswer))")

        let huge = try RawServer { _, connection in
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: \(17 << 20)\r\n\r\n", [])
            let chunk = [UInt8](repeating: 0x20, count: 1 << 20)
            for _ in 0..<17 where connection.write("", chunk) {}
            return .close
        }
        let hugeAnswer = try exchange([request(to: huge.url)])[0]
        #expect(failure(hugeAnswer)?.code == 0)
        #expect(reason(hugeAnswer) == "response body over \(16 << 20) bytes")
        let small = try exchange([request(to: huge.url)], maximumBodyBytes: 1000)[0]
        #expect(reason(small) == "response body over 1000 bytes")

        let stalled = try RawServer { _, _ in .stall }
        let started = monotonicSeconds()
        let stalledAnswer = try exchange([request(to: stalled.url, timeout: 0.5)])[0]
        let waited = monotonicSeconds() - started
        #expect(failure(stalledAnswer)?.code == 0)
        #expect(reason(stalledAnswer).contains("curl 28"), "\(reason(stalledAnswer))")
        #expect(waited >= 0.45 && waited < 2, "waited \(waited) s")
    }

    // A transport destroyed with a request in flight (the daemon stopping) calls nothing back
    // and leaves no descriptor registered on the loop that keeps running.
    @Test func aTransportGoneMidRequestLeavesTheLoopClean() throws {
        let stalled = try RawServer { _, _ in .stall }
        let loop = try EventLoop()
        func registered() -> [Int32] { (0..<4096).filter { loop.isRegistered($0) } }
        var transport: CurlTransport? = CurlTransport(loop: loop)
        var completed = false
        var duringRequest: [Int32] = []
        transport?.send(request(to: stalled.url, timeout: 5)) { _ in completed = true }
        loop.schedule(after: 0.3) {
            duringRequest = registered()
            transport = nil
        }
        loop.schedule(after: 0.5) { loop.stop() }
        try loop.run()
        #expect(!completed)
        #expect(stalled.requests.count == 1)
        #expect(!duringRequest.isEmpty, "the request's socket was not on the loop")
        #expect(registered().isEmpty, "left on the loop: \(registered())")
    }

    // A bad URL fails without reaching the network, after `send` returned.
    @Test func unusableURLIsAnError() throws {
        let answer = try exchange([request(to: "ftp://127.0.0.1:1/")])[0]
        #expect(failure(answer)?.code == 0)
        #expect(reason(answer).contains("curl 1)"), "\(reason(answer))")  // CURLE_UNSUPPORTED_PROTOCOL
    }
}

/// A loopback TCP server on a thread of its own that answers each request as told.
final class RawServer: @unchecked Sendable {
    enum After { case keepOpen, close, reset, stall }

    final class Connection {
        let fd: Int32
        init(fd: Int32) { self.fd = fd }
        /// Writes text then bytes; false once the peer is gone.
        @discardableResult
        func write(_ text: String, _ bytes: [UInt8]) -> Bool {
            let all = Array(text.utf8) + bytes
            var offset = 0
            while offset < all.count {
                let n = all[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n <= 0 { return false }
                offset += n
            }
            return true
        }
    }

    static let gzipEnvelope: [UInt8] = [
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xab, 0x56, 0x2a, 0x2e, 0x49, 0x2c, 0x29, 0x2d, 0x8e,
        0x4f, 0xce, 0x4f, 0x49, 0x55, 0xb2, 0x32, 0x32, 0x30, 0xd0, 0x81, 0x89, 0xe4, 0xa6, 0x16, 0x17, 0x27, 0xa6, 0x03,
        0x05, 0x95, 0xfc, 0xbd, 0x95, 0x74, 0x94, 0x8a, 0x52, 0x8b, 0x0b, 0xf2, 0xf3, 0x8a, 0x81, 0xfc, 0xea, 0xda, 0x5a,
        0x00, 0xcd, 0xb8, 0x2e, 0x29, 0x37, 0x00, 0x00, 0x00,
    ]

    let port: Int
    var url: String { "http://127.0.0.1:\(port)/json/1.3/" }
    private let listener: Int32
    private let lock = NSLock()
    private var _requests: [String] = []
    private var _connections = 0
    private var stop = false
    var requests: [String] { lock.withLock { _requests } }
    var connections: Int { lock.withLock { _connections } }

    init(answer: @escaping @Sendable (String, Connection) -> After) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        guard bound == 0, listen(listener, 8) == 0 else { throw FixtureError("raw server: bind/listen failed, errno \(errno)") }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread { [self] in serve(answer) }.start()
    }

    deinit {
        lock.withLock { stop = true }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve(_ answer: @escaping @Sendable (String, Connection) -> After) {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 { return }
            lock.withLock { _connections += 1 }
            Thread { [self] in handle(fd, answer) }.start()
        }
    }

    /// Reads requests (headers + Content-Length body) and answers each.
    private func handle(_ fd: Int32, _ answer: @escaping @Sendable (String, Connection) -> After) {
        let connection = Connection(fd: fd)
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        defer { close(fd) }
        while true {
            if let end = buffer.firstRange(of: Array("\r\n\r\n".utf8)) {
                let head = String(decoding: buffer[..<end.lowerBound], as: UTF8.self)
                let lengthLine = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                let length = lengthLine.flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                if buffer.count >= end.upperBound + length {
                    let request = String(decoding: buffer[..<(end.upperBound + length)], as: UTF8.self)
                    buffer.removeFirst(end.upperBound + length)
                    lock.withLock { _requests.append(request) }
                    switch answer(request, connection) {
                    case .keepOpen: continue
                    case .close: return
                    case .reset:
                        var hardClose = linger(l_onoff: 1, l_linger: 0)
                        setsockopt(fd, SOL_SOCKET, SO_LINGER, &hardClose, socklen_t(MemoryLayout<linger>.size))
                        return
                    case .stall:
                        while !lock.withLock({ stop }) { usleep(50_000) }  // a server that never answers, until the test ends
                        return
                    }
                }
            }
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return }
            buffer.append(contentsOf: chunk[..<n])
        }
    }
}

/// A count shared by a test and its server threads.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    /// Counts one more; returns the new count.
    func next() -> Int { lock.withLock { value += 1; return value } }
}
