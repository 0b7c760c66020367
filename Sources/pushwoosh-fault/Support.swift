// pushwoosh-fault: small helpers on HarnessSupport (the line client, the notify receiver, HTTP).

import AgentCore
import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport

// MARK: - Small helpers (the rest is HarnessSupport's)

struct Failure: Error, CustomStringConvertible {
    let description: String
    init(_ text: String) { description = text }
}

func die(_ text: String) -> Never {
    FileHandle.standardError.write(Data("pushwoosh-fault: \(text)\n".utf8))
    exit(2)
}

func monotonicNow() -> Double { monotonicSeconds() }

func sleepSeconds(_ s: Double) {
    guard s > 0 else { return }
    var request = timespec(tv_sec: Int(s), tv_nsec: Int((s - Double(Int(s))) * 1e9))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

func setReceiveTimeout(_ fd: Int32, _ seconds: Double) { LineClient.setReceiveTimeout(fd, seconds) }

func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool { (try? LineClient.sendAll(fd, bytes)) != nil }

extension NotifyReceiver {
    /// Waits up to `timeout` for a datagram containing `needle`.
    func wait(containing needle: String, timeout: Double) -> String? {
        let deadline = monotonicNow() + timeout
        while true {
            let left = deadline - monotonicNow()
            guard left > 0, let message = receive(timeout: left) else { return nil }
            if message.contains(needle) { return message }
        }
    }
}

extension LineClient {
    /// One request, one answer (no pipelining: the answer is the next line), as a typed JSON value.
    func request(_ method: SocketMethod, _ params: JSONValue = [:], id: Int = 1) -> JSONValue? {
        let request: JSONValue = ["jsonrpc": "2.0", "id": .number(Double(id)), "method": .string(method.rawValue), "params": params]
        guard send(JSONWriter.encode(request) + [UInt8(ascii: "\n")]), let line = readLineBytes() else { return nil }
        return try? JSONReader.parse(line)
    }
}

/// One HTTP/1.1 request on loopback with `Connection: close`; returns status and body.
func httpCall(_ method: String, _ url: String, _ body: String? = nil, timeout: Double = 10) throws -> (Int, String) {
    guard let parsed = URL(string: url), let host = parsed.host, let port = parsed.port else { throw Failure("bad URL \(url)") }
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw Failure("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw Failure("not an IPv4 address: \(host)") }
    let rc = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard rc == 0 else { throw Failure("connect \(url): \(String(cString: strerror(errno)))") }
    setReceiveTimeout(fd, timeout)
    let payload = Array((body ?? "").utf8)
    var path = parsed.path.isEmpty ? "/" : parsed.path
    if let query = parsed.query { path += "?" + query }
    let head = "\(method) \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nContent-Type: application/json\r\n"
        + "Content-Length: \(payload.count)\r\nConnection: close\r\n\r\n"
    guard sendAll(fd, Array(head.utf8) + payload) else { throw Failure("send to \(url) failed") }
    var response: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n < 0 && errno == EINTR { continue }
        if n < 0 { throw Failure("recv from \(url): \(String(cString: strerror(errno)))") }
        if n == 0 { break }
        response.append(contentsOf: chunk[..<n])
    }
    let text = String(decoding: response, as: UTF8.self)
    guard let statusLine = text.split(separator: "\r\n", maxSplits: 1).first,
          let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "")
    else { throw Failure("no HTTP status from \(url)") }
    let bodyText = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
    return (status, bodyText)
}

/// Starts `argv` with stdout to /dev/null and stderr to `stderrPath`; returns the pid.
func spawn(_ argv: [String], environment: [String: String], stderrPath: String) throws -> pid_t {
    switch ChildProcess.spawn(path: argv[0], arguments: Array(argv.dropFirst()), environment: environment,
                              output: .files(stdout: "/dev/null", stderr: stderrPath)) {
    case .success(let pid): return pid
    case .failure(let error): throw Failure("posix_spawn \(argv[0]): \(error.message)")
    }
}
