import AgentCore
import AgentPosix
import FoundationEssentials
import Glibc

/// Why a call to the emulator failed.
public struct HTTPError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A minimal blocking HTTP/1.1 client for the emulator's admin API on loopback:
/// one connection per call (`Connection: close`), JSON in and out. The soak runner, the
/// fault tool, the benchmarks, the tests' emulator fixture and `pushwoosh-agentctl fleet
/// advance-clock` use it.
public struct LoopbackHTTP: Sendable {
    public let host: String
    public let port: UInt16
    public var timeout: Double
    /// Sent as `Authorization: Bearer TOKEN` (an emulator started with `--admin-token`).
    public var bearerToken: String?

    public init(host: String = "127.0.0.1", port: UInt16, timeout: Double = 10, bearerToken: String? = nil) {
        self.host = host
        self.port = port
        self.timeout = timeout
        self.bearerToken = bearerToken
    }

    /// The token of an admin token file as the emulator reads it (`--admin-token FILE`): the
    /// file's text without trailing white space, not empty, with no white space inside.
    public static func bearerToken(file path: String) throws(HTTPError) -> String {
        guard let data = try? readWholeFile(path) else { throw HTTPError("\(path): cannot read the file") }
        var text = String(decoding: data, as: UTF8.self)
        while let last = text.last, last.isWhitespace { text.removeLast() }
        guard !text.isEmpty else { throw HTTPError("\(path): the file is empty") }
        guard !text.contains(where: { $0.isWhitespace || $0.isNewline }) else { throw HTTPError("\(path): the token contains white space") }
        return text
    }

    public struct Response: Sendable {
        public var status: Int
        public var body: [UInt8]
        public var json: JSONValue? { try? JSONReader.parse(body) }
    }

    /// The server of an `http://HOST:PORT/PATH` URL (an IPv4 host) and the path with its query.
    public static func parse(url: String, timeout: Double = 10) -> (server: LoopbackHTTP, path: String)? {
        guard let parsed = URL(string: url), parsed.scheme == "http", let host = parsed.host,
              let port = parsed.port.flatMap(UInt16.init(exactly:)) else { return nil }
        var path = parsed.path.isEmpty ? "/" : parsed.path
        if let query = parsed.query { path += "?" + query }
        return (LoopbackHTTP(host: host, port: port, timeout: timeout), path)
    }

    /// Sends `method path` with an optional JSON body; returns status and body.
    public func call(_ method: String, _ path: String, json: JSONValue? = nil) throws(HTTPError) -> Response {
        try call(method, path, body: json.map(JSONWriter.encode))
    }

    /// Sends `method path` with `body` (as `application/json`; nil: none); returns status and body.
    public func call(_ method: String, _ path: String, body: [UInt8]?) throws(HTTPError) -> Response {
        let fd: Int32
        do {
            fd = try BlockingSocket.connectTCP(host: host, port: port, timeout: timeout)
        } catch {
            if error.call == "inet_pton" { throw HTTPError("not an IPv4 address: \(host)") }
            throw HTTPError("\(error.call) \(host):\(port): \(error.message)")
        }
        defer { close(fd) }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nConnection: close\r\n"
        if let bearerToken { head += "Authorization: Bearer \(bearerToken)\r\n" }
        if body != nil { head += "Content-Type: application/json\r\n" }
        head += "Content-Length: \(body?.count ?? 0)\r\n\r\n"
        do throws(PosixError) {
            try BlockingSocket.sendAll(fd, Array(head.utf8) + (body ?? []))
        } catch {
            throw HTTPError("\(method) \(path): \(error)")
        }
        let reader = HTTPResponseReader(fd: fd)
        guard let answer = reader.next(request: method) else {
            let why = reader.endErrno == EAGAIN ? "no answer within \(timeout) s" : "the connection ended before an answer"
            throw HTTPError("\(method) \(path): \(why)")
        }
        guard answer.head.status != 0 else { throw HTTPError("\(method) \(path): not an HTTP/1.x answer") }
        guard answer.complete else {
            throw HTTPError("\(method) \(path): HTTP \(answer.status) with \(answer.body.count) of \(answer.head.contentLength ?? 0) body bytes: the connection ended")
        }
        return Response(status: answer.status, body: answer.body)
    }

    /// Like `call`, but requires a 2xx answer with a JSON body.
    public func json(_ method: String, _ path: String, json: JSONValue? = nil) throws(HTTPError) -> JSONValue {
        let r = try call(method, path, json: json)
        guard (200..<300).contains(r.status), let value = r.json else {
            throw HTTPError("\(method) \(path): HTTP \(r.status) \(String(decoding: r.body.prefix(300), as: UTF8.self))")
        }
        return value
    }
}
