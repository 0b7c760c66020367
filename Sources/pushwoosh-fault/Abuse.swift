// `pushwoosh-fault hold` and `pushwoosh-fault abuse`: what an unprivileged local user can
// do to the agent's two doors (the socket and the HTTP interface), on loopback only.

import AgentPosix
import AgentWire
import Foundation
import Glibc
import HarnessSupport
import ToolSupport

/// A raw nonblocking stream socket to the agent's socket or to a loopback HTTP port.
func connectRaw(socket path: String?, port: UInt16?) -> Int32? {
    let fd: Int32
    if let path {
        guard let connected = try? UnixSocket.connect(to: path).take() else { return nil }
        fd = connected
    } else if let port {
        guard let connected = try? BlockingSocket.connectTCP(port: port) else { return nil }
        fd = connected
    } else {
        return nil
    }
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    return fd
}

/// Writes what the socket takes now; the number of bytes written.
@discardableResult
func sendSome(_ fd: Int32, _ bytes: [UInt8]) -> Int {
    bytes.withUnsafeBytes { max(0, Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))) }
}

/// Whether the server has closed `fd` (end of input or reset), reading and dropping what came.
func serverClosed(_ fd: Int32) -> Bool {
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        if n > 0 { continue }
        if n == 0 { return true }
        return errno != EAGAIN && errno != EWOULDBLOCK
    }
}

let halfLine = Array(#"{"jsonrpc":"2.0","id":1,"method":"sta"#.utf8)
let halfHeaders = Array("POST /ofrep/v1/evaluate/flags HTTP/1.1\r\nHost: x\r\nContent-Le".utf8)
let statusLine = RPCEncoder.request(id: .number(1), SocketCall.status)

struct HoldOptions {
    var socket: String?
    var httpPort: UInt16?
    var socketCount = 0
    var httpCount = 0
    /// `half`: a half-written line or half-sent headers; `idle`: nothing; `pipeline`:
    /// `status` requests written as long as the agent takes them, answers never read;
    /// `long`: one request line of almost 1 MiB (the line limit) written as far as the agent
    /// takes it, never finished.
    var mode = "half"
    var seconds = 10.0
}

/// Opens the connections, prints `holding S socket H http` (those the agent accepted),
/// holds them `seconds` (pipelining writes on), then prints how many the agent closed.
func runHold(_ o: HoldOptions) -> Int32 {
    var fds: [Int32] = []
    for _ in 0..<o.socketCount {
        guard let fd = connectRaw(socket: o.socket, port: nil) else { continue }
        fds.append(fd)
    }
    let socketFDs = fds.count
    for _ in 0..<o.httpCount {
        guard let fd = connectRaw(socket: nil, port: o.httpPort) else { continue }
        fds.append(fd)
    }
    for (index, fd) in fds.enumerated() where o.mode == "half" {
        sendSome(fd, index < socketFDs ? halfLine : halfHeaders)
    }
    let pipelined = Array(repeating: statusLine, count: 256).flatMap { $0 }
    // A `get` of a 1,000,000-byte key without its closing `"}}` and newline: never finished.
    let longLine = Array(RPCEncoder.request(id: .number(1), SocketCall.get(key: String(repeating: "x", count: 1_000_000))).dropLast(4))
    var longSent = [Int](repeating: 0, count: fds.count)
    sleepSeconds(0.3)
    let refused = fds.filter { o.mode != "pipeline" && o.mode != "long" && serverClosed($0) }.count
    print("holding \(fds.count - refused) of \(o.socketCount + o.httpCount)")
    fflush(nil)
    let deadline = monotonicSeconds() + o.seconds
    var written = 0
    while monotonicSeconds() < deadline {
        if o.mode == "pipeline" {
            for fd in fds { written += sendSome(fd, pipelined) }
        }
        if o.mode == "long" {
            for (index, fd) in fds.enumerated() where longSent[index] < longLine.count {
                let sent = longLine[longSent[index]...].withUnsafeBytes {
                    max(0, Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)))
                }
                longSent[index] += sent
                written += sent
            }
        }
        sleepSeconds(0.05)
    }
    let closed = o.mode == "pipeline" || o.mode == "long" ? 0 : fds.filter(serverClosed).count
    print("closed \(closed) written \(written)")
    for fd in fds { Glibc.close(fd) }
    return 0
}
