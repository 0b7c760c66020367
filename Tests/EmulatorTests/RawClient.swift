import AgentPosix
import Dispatch
import Foundation
import Glibc
import ToolSupport

/// A raw TCP client for what URLSession hides: truncated bodies, stalls, resets,
/// and a thousand connections at once. Blocking calls run off the cooperative pool.
final class RawSocket: @unchecked Sendable {
    let fd: Int32

    enum End: Equatable { case complete, eof, reset, timeout, error(Int32) }

    struct Answer {
        var bytes: [UInt8]
        var end: End
        var text: String { String(decoding: bytes, as: UTF8.self) }
        var head: HTTPResponseHead? { HTTPResponseHead.parse(bytes) }
        var status: Int? { head.flatMap { $0.status == 0 ? nil : $0.status } }
        var headerEnd: Int? { head?.length }
        var contentLength: Int? { head?.contentLength }
        var body: [UInt8] { headerEnd.map { Array(bytes[$0...]) } ?? [] }
        var complete: Bool {
            guard let head, let n = head.contentLength else { return false }
            return bytes.count - head.length >= n
        }
    }

    init(port: UInt16) throws {
        fd = try BlockingSocket.connectTCP(port: port)
    }

    deinit { close(fd) }

    /// Sends all of `text`; a peer that has gone away ends it quietly (the read tells).
    func send(_ text: String) {
        try? BlockingSocket.sendAll(fd, Array(text.utf8))
    }

    /// `request` sent on a new connection, and its answer.
    static func answer(port: UInt16, _ request: String, timeout: Double = 2) throws -> Answer {
        let socket = try RawSocket(port: port)
        socket.send(request)
        return socket.read(timeout: timeout)
    }

    /// An HTTP/1.1 request; `close`: ask the server to close after answering.
    func request(_ verb: String, _ path: String, body: String = "", close: Bool = true) {
        var head = "\(verb) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if !body.isEmpty { head += "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n" }
        if close { head += "Connection: close\r\n" }
        send(head + "\r\n" + body)
    }

    func device(_ method: String, hwid: String, close: Bool = true) {
        request("POST", "/json/1.3/\(method)",
                body: #"{"request":{"application":"ABCDE-12345","hwid":"\#(hwid)","userId":"\#(hwid)","v":"7.2.10","device_type":1}}"#,
                close: close)
    }

    /// Reads one answer: until it is complete (Content-Length), the server closes or resets, or `timeout`.
    func read(timeout: Double, untilClose: Bool = false) -> Answer {
        var answer = Answer(bytes: [], end: .timeout)
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeout * 1e9)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            if !untilClose, answer.complete { answer.end = .complete; return answer }
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else { return answer }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&p, 1, Int32(max(1, (deadline - now) / 1_000_000)))
            if ready == 0 { continue }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 { answer.bytes += buffer[..<n]; continue }
            if n == 0 { answer.end = answer.complete ? .complete : .eof; return answer }
            if errno == EINTR || errno == EAGAIN { continue }
            answer.end = errno == ECONNRESET ? .reset : .error(errno)
            return answer
        }
    }
}

/// Runs blocking socket work on a dispatch thread, not the test's cooperative one.
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { c in
        DispatchQueue.global().async { c.resume(with: Result { try body() }) }
    }
}

/// Reads one answer from each socket with poll(2), all at once; the times are when each completed.
func readAll(_ sockets: [RawSocket], timeout: Double) -> [(RawSocket.Answer, UInt64)] {
    var answers = sockets.map { _ in (RawSocket.Answer(bytes: [], end: .timeout), UInt64(0)) }
    var open = Set(sockets.indices)
    let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeout * 1e9)
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while !open.isEmpty {
        let now = DispatchTime.now().uptimeNanoseconds
        guard now < deadline else { break }
        let order = open.sorted()
        var fds = order.map { pollfd(fd: sockets[$0].fd, events: Int16(POLLIN), revents: 0) }
        guard poll(&fds, nfds_t(fds.count), Int32(max(1, (deadline - now) / 1_000_000))) > 0 else { continue }
        for (k, p) in zip(order, fds) where p.revents != 0 {
            let n = buffer.withUnsafeMutableBytes { recv(sockets[k].fd, $0.baseAddress, $0.count, 0) }
            if n > 0 { answers[k].0.bytes += buffer[..<n] }
            if n > 0, !answers[k].0.complete { continue }
            answers[k].0.end = answers[k].0.complete ? .complete : (n == 0 ? .eof : .reset)
            answers[k].1 = DispatchTime.now().uptimeNanoseconds
            open.remove(k)
        }
    }
    return answers
}
