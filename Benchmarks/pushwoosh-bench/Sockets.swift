import AgentCore
import AgentWire
import Glibc

/// Small blocking socket helpers for the benchmark's setup steps (not the load driver).
enum Sockets {
    static func unixAddress(_ path: String) -> (sockaddr_un, socklen_t) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        precondition(bytes.count < MemoryLayout.size(ofValue: address.sun_path), "socket path too long: \(path)")
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return (address, socklen_t(MemoryLayout<sockaddr_un>.size))
    }

    /// A connected blocking Unix stream socket.
    static func connectUnix(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
        var (address, length) = unixAddress(path)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) }
        }
        if result != 0 {
            let code = errno
            close(fd)
            throw BenchError("connect \(path): \(String(cString: strerror(code)))")
        }
        return fd
    }

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

    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw BenchError("send: \(String(cString: strerror(errno)))")
            }
            offset += n
        }
    }

    static func setReceiveTimeout(_ fd: Int32, _ seconds: Double) {
        var tv = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }
}

/// One blocking JSON-RPC connection to the agent (setup and checks).
final class RPCConnection {
    let fd: Int32
    private var pending: [UInt8] = []
    private var nextID = 1

    init(path: String, timeout: Double = 5) throws {
        fd = try Sockets.connectUnix(path)
        Sockets.setReceiveTimeout(fd, timeout)
    }

    deinit { close(fd) }

    func readLine() throws -> [UInt8] {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            if let nl = pending.firstIndex(of: 0x0A) {
                let line = Array(pending[..<nl])
                pending.removeFirst(nl + 1)
                return line
            }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                if errno == EINTR { continue }
                throw BenchError("recv: \(String(cString: strerror(errno)))")
            }
            if n == 0 { throw BenchError("the agent closed the connection") }
            pending.append(contentsOf: chunk[..<n])
        }
    }

    /// Sends a request and returns its `result` (throws on an error answer).
    func call(_ method: SocketMethod, _ params: [String: JSONValue] = [:]) throws -> JSONValue {
        let id = nextID
        nextID += 1
        try Sockets.sendAll(fd, RPCEncoder.request(id: .number(Double(id)), method: method, params: params))
        let line = try readLine()
        let answer = try JSONReader.parse(line)
        guard let result = answer["result"] else {
            throw BenchError("\(method) failed: \(String(decoding: line, as: UTF8.self))")
        }
        return result
    }

    static func call(_ path: String, _ method: SocketMethod, _ params: [String: JSONValue] = [:]) throws -> JSONValue {
        try RPCConnection(path: path).call(method, params)
    }
}

/// A `NOTIFY_SOCKET` datagram receiver.
final class NotifyReceiver {
    let fd: Int32
    let path: String

    init(path: String) throws {
        self.path = path
        unlink(path)
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
        var (address, length) = Sockets.unixAddress(path)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard result == 0 else { throw BenchError("bind \(path): \(String(cString: strerror(errno)))") }
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// Drops datagrams already queued.
    func drain() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while buffer.withUnsafeMutableBytes({ recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }) > 0 {}
    }

    /// Waits for a datagram with a line equal to `line` (e.g. `READY=1`); returns the
    /// monotonic time it was received, or nil after `timeout`.
    func wait(for line: String, timeout: Double, alive: () -> Bool = { true }) -> (at: Double, datagram: String)? {
        let deadline = Clock.now() + timeout
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let remaining = deadline - Clock.now()
            if remaining <= 0 { return nil }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, Int32(min(remaining, 0.1) * 1000) + 1)
            if ready <= 0 {
                if !alive() { return nil }
                continue
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            let at = Clock.now()
            guard n > 0 else { continue }
            let text = String(decoding: buffer[..<n], as: UTF8.self)
            if text.split(separator: "\n").contains(where: { $0 == line }) { return (at, text) }
        }
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
