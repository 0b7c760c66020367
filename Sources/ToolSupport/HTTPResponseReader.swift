import AgentCore
import Glibc

/// The head of one HTTP/1.1 response: the framing every client of the project's own reads
/// answers with (the tools' `LoopbackHTTP`, the benchmark's HTTP client, the tests' clients).
public struct HTTPResponseHead: Sendable, Equatable {
    /// From the status line; 0 when it is not `HTTP/1.x NNN …`.
    public var status: Int
    /// In arrival order, names lowercased, values without the optional whitespace around them.
    public var headers: [HTTPHeader]
    /// The bytes the head takes, its blank line included: where the body starts.
    public var length: Int

    public var contentLength: Int? { headers.value(named: "content-length").flatMap { Int($0) } }

    /// Whether a response to `request` with this head has a body at all (RFC 9112 6.3): none
    /// for HEAD, 1xx, 204 and 304.
    public func hasBody(request method: String) -> Bool {
        method != "HEAD" && status >= 200 && status != 204 && status != 304
    }

    /// The head at the start of `bytes`; nil while the blank line that ends it has not come.
    public static func parse(_ bytes: [UInt8]) -> HTTPResponseHead? {
        guard let end = bytes.firstRange(of: [13, 10, 13, 10])?.upperBound else { return nil }
        let lines = String(decoding: bytes[..<(end - 4)], as: UTF8.self).split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusLine = lines.first.map(String.init) ?? ""
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        let status = statusLine.hasPrefix("HTTP/1.") && parts.count >= 2 ? Int(parts[1]) ?? 0 : 0
        let headers = lines.dropFirst().compactMap { line -> HTTPHeader? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return HTTPHeader(line[..<colon].lowercased(), line[line.index(after: colon)...].trimmingOptionalWhitespace())
        }
        return HTTPResponseHead(status: status, headers: headers, length: end)
    }
}

/// Responses read one after another from a connected blocking socket (keep-alive): a head,
/// then `Content-Length` bytes of body, or, without one, everything until the peer closes.
/// Bytes past one response stay for the next. The caller owns the socket and its timeouts.
public final class HTTPResponseReader {
    public struct Response: Sendable {
        public var head: HTTPResponseHead
        public var body: [UInt8]
        /// False when the peer closed (or the read timed out) before the whole body came.
        public var complete: Bool
        public var status: Int { head.status }
    }

    public let fd: Int32
    /// Why the last read that came back empty did: 0 when the peer closed, else its errno
    /// (`EAGAIN`: the socket's receive timeout passed).
    public private(set) var endErrno: Int32 = 0
    private var buffer: [UInt8] = []
    /// What one `recv` fills, kept between reads rather than allocated for each.
    private var chunk = [UInt8](repeating: 0, count: 65_536)

    public init(fd: Int32) { self.fd = fd }

    /// The next response to a `method` request; nil when the connection ends (closed, reset or
    /// timed out) before a whole head has come.
    public func next(request method: String = "GET") -> Response? {
        var head = HTTPResponseHead.parse(buffer)
        while head == nil {
            guard fill() else { return nil }
            head = HTTPResponseHead.parse(buffer)
        }
        guard let head else { return nil }
        buffer.removeSubrange(..<head.length)
        var complete = true
        let length: Int
        if !head.hasBody(request: method) {
            length = 0
        } else if let declared = head.contentLength {
            while buffer.count < declared, fill() {}
            complete = buffer.count >= declared
            length = min(declared, buffer.count)
        } else {
            while fill() {}
            length = buffer.count
        }
        let body = Array(buffer[..<length])
        buffer.removeSubrange(..<length)
        return Response(head: head, body: body, complete: complete)
    }

    /// Appends what the socket has; false at its end (closed, reset, timed out).
    private func fill() -> Bool {
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                buffer.append(contentsOf: chunk[..<n])
                return true
            }
            if n < 0, errno == EINTR { continue }
            endErrno = n == 0 ? 0 : errno
            return false
        }
    }
}
