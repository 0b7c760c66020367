import AgentCore
import AgentPosix
import Glibc
import HarnessSupport

/// Small blocking socket helpers for the benchmark's setup steps (not the load driver), on
/// HarnessSupport's.
enum Sockets {
    /// A connected blocking Unix stream socket.
    static func connectUnix(_ path: String) throws -> Int32 {
        do {
            return try UnixSocket.connect(to: path).take()
        } catch {
            throw BenchError("connect \(path): \(error)")
        }
    }

    static func setReceiveTimeout(_ fd: Int32, _ seconds: Double) { BlockingSocket.setReceiveTimeout(fd, seconds) }

    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws { try BlockingSocket.sendAll(fd, bytes) }

    /// Waits until something accepts on `path` (a listener coming up).
    static func waitForListener(_ path: String, timeout: Double, alive: () -> Bool = { true }) throws {
        let deadline = Clock.now() + timeout
        while Clock.now() < deadline {
            if let fd = try? connectUnix(path) {
                close(fd)
                return
            }
            guard alive() else { throw BenchError("the server for \(path) exited") }
            Clock.sleep(0.005)
        }
        throw BenchError("nothing listens on \(path) after \(timeout) s")
    }
}

/// A tiny HTTP/1.1 client on loopback TCP (the emulator's admin API).
enum HTTP {
    static func request(port: UInt16, method: String, path: String, body: [UInt8] = []) throws -> (status: Int, body: String) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { throw BenchError("connect 127.0.0.1:\(port): \(String(cString: strerror(errno)))") }
        Sockets.setReceiveTimeout(fd, 30)
        let head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        try Sockets.sendAll(fd, Array(head.utf8) + body)
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 { if errno == EINTR { continue }; throw BenchError("recv: \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            response.append(contentsOf: chunk[..<n])
        }
        let text = String(decoding: response, as: UTF8.self)
        let statusLine = text.prefix { $0 != "\r" }.split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw BenchError("bad HTTP answer: \(text.prefix(200))")
        }
        let body = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
        return (status, body)
    }
}
