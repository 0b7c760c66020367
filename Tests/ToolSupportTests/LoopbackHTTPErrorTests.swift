import AgentCore
import AgentPosix
import Foundation
import Glibc
import Testing
import ToolSupport

/// A failed call to the emulator's admin API names the method, the path and what went wrong:
/// the status and the body of an answer that was not asked for, the server that refused.
@Suite struct LoopbackHTTPErrorTests {
    /// A one-connection HTTP server on loopback that reads a request head and writes `answer`.
    static func serveOnce(_ answer: String) throws -> UInt16 {
        let (fd, port) = try TCPListener.listen(host: "127.0.0.1", port: 0, backlog: 1)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        Thread {
            defer { close(fd) }
            let client = accept(fd, nil, nil)
            guard client >= 0 else { return }
            defer { close(client) }
            var head: [UInt8] = []
            var byte: UInt8 = 0
            while !head.suffix(4).elementsEqual("\r\n\r\n".utf8), read(client, &byte, 1) == 1 { head.append(byte) }
            let bytes = Array(answer.utf8)
            _ = bytes.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
        }.start()
        return port
    }

    @Test("The emulator answering 500: the error has the method, the path, the status and the body")
    func answered500() throws {
        let body = "{\"error\":\"boom\"}"
        let port = try Self.serveOnce("HTTP/1.1 500 Internal Server Error\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)")
        do {
            _ = try LoopbackHTTP(port: port, timeout: 5).json("POST", "/admin/faults", json: ["http": 503])
            Issue.record("a 500 was taken for an answer")
        } catch {
            #expect(error.method == "POST" && error.path == "/admin/faults" && error.server == "127.0.0.1:\(port)")
            #expect(error.failure == .answered(status: 500, body: body))
            #expect(error.status == 500)
            #expect(error.description == "POST /admin/faults: HTTP 500 \(body)")
        }
    }

    @Test("A closed port: the error names the call, the server and the method and path")
    func refused() throws {
        let (fd, port) = try TCPListener.listen(host: "127.0.0.1", port: 0, backlog: 1)
        close(fd)
        do {
            _ = try LoopbackHTTP(port: port, timeout: 2).call("GET", "/admin/requests")
            Issue.record("connected to a closed port")
        } catch {
            #expect(error.failure == .connect(PosixError(errno: ECONNREFUSED, call: "connect", path: "127.0.0.1:\(port)")))
            #expect(error.status == nil)
            #expect(error.description == "GET /admin/requests: connect 127.0.0.1:\(port): Connection refused")
        }
        #expect(throws: EmulatorCallError(method: "GET", path: "/", server: "localhost:80", .notIPv4)) {
            try LoopbackHTTP(host: "localhost", port: 80).call("GET", "/")
        }
    }

    @Test("An admin token file that cannot be used names the file and why")
    func adminTokenFile() {
        #expect(throws: AdminTokenFileError(path: "/nonexistent/token", why: "cannot read the file")) {
            try LoopbackHTTP.bearerToken(file: "/nonexistent/token")
        }
    }
}
