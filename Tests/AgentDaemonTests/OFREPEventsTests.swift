import AgentCore
import AgentPosix
import Foundation
import Glibc
import HarnessSupport
import Testing
@testable import AgentDaemon
import ToolSupport

/// docs/http.md F.3 (OFREP change events) and F's one deadline per request, budget and one
/// reading of each request, against the real agent and emulator.
@Suite(.serialized) struct OFREPEventsTests {
    let http = HTTPInterfaceTests()
    static let bulk = "/ofrep/v1/evaluate/flags"
    static let context = #"{"context":{}}"#

    // F.3: the bulk answer names the stream; a kill in the emulator and a refresh give one
    // refetchEvaluation whose etag is the new bulk ETag; If-None-Match still gets 304; a
    // refresh that changes nothing tells nothing.
    @Test func aChangeIsOneEventCarryingTheNewETag() throws {
        let (emulator, agent, endpoint) = try http.start()
        let h = try HTTPClient(endpoint)
        let before = h.request("POST", Self.bulk, body: Self.context)
        #expect(before.status == 200)
        let streams = before.json["eventStreams"]
        #expect(streams == .array([.object(["type": "sse", "endpoint": .object(["requestUri": "/ofrep/v1/events"]),
                                             "inactivityDelaySec": 120])]))
        let stream = try EventStreamClient(endpoint)
        #expect(stream.status == 200)
        #expect(stream.headers["content-type"] == "text/event-stream")
        let socket = try LineClient(path: agent.socketPath)
        // Nothing changed: no event.
        #expect(socket.call("refresh")["result"] != nil)
        #expect(stream.events(within: 1).isEmpty)
        #expect(emulator.admin("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/kill").0 == 200)
        let started = Date()
        #expect(socket.call("refresh")["result"] != nil)
        let events = stream.events(within: 5, atLeast: 1)
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(events.count == 1, "\(events)")
        guard let event = events.first else { return }
        #expect(event.fields["event"] == "message")
        #expect(event.fields["id"] == "1")
        let data = (try? JSONReader.parse(event.fields["data"] ?? "")) ?? .null
        #expect(data["type"] == "refetchEvaluation")
        #expect(data["lastModified"]?.numberValue.map { $0 > 1_000_000_000 } == true)
        let after = h.request("POST", Self.bulk + "?flagConfigEtag=x", body: Self.context)
        #expect(after.status == 200)
        #expect(data["etag"]?.stringValue == after.headers["etag"], "the event's etag is what a re-fetch gets")
        #expect(after.headers["etag"] != before.headers["etag"])
        #expect(after.json["flags"]?.arrayValue?.first { $0["key"] == "new_checkout" }?["reason"] == "DISABLED")
        #expect(h.request("POST", Self.bulk, headers: ["If-None-Match": after.headers["etag"] ?? ""], body: Self.context).status == 304)
        let metrics = h.request("GET", "/metrics").body
        #expect(metric(metrics, "pushwoosh_agent_ofrep_event_streams") == 1)
        #expect(metric(metrics, "pushwoosh_agent_ofrep_events_total") == 1)
        // The stream goes: the agent lets it go.
        stream.close()
        #expect(eventually(timeout: 5) { metric(h.request("GET", "/metrics").body, "pushwoosh_agent_ofrep_event_streams") == 0 })
        #expect(agent.process.isRunning)
    }

    // F.3: a comment at least every keep-alive period; the same token as OFREP; GET only.
    @Test func keepAlivesTokenAndMethod() throws {
        let dir = TempDir(files: ["token": "sse-token\n"])
        let tokenFile = dir.file("token")
        let (_, agent, endpoint) = try http.start(http: "TokenFile=\(tokenFile)", environment: ["PUSHWOOSH_AGENT_SSE_KEEPALIVE": "0.3"])
        #expect(try EventStreamClient(endpoint).status == 401)
        let h = try HTTPClient(endpoint)
        #expect(h.request("POST", "/ofrep/v1/events", headers: ["Authorization": "Bearer sse-token"]).status == 405)
        let stream = try EventStreamClient(endpoint, headers: ["Authorization": "Bearer sse-token"])
        #expect(stream.status == 200)
        usleep(1_000_000)
        let comments = stream.readAvailable().components(separatedBy: "\n").filter { $0 == ": keep-alive" }
        #expect(comments.count >= 2, "keep-alive comments in 1 s at 0.3 s: \(comments.count)")
        #expect(agent.process.isRunning)
    }

    // F.3 + F.2: streams take at most half of MaxConnections (503 beyond, with Retry-After);
    // /healthz is answered meanwhile.
    @Test func streamsHaveHalfTheBudget() throws {
        let (_, agent, endpoint) = try http.start(http: "MaxConnections=4")
        let s1 = try EventStreamClient(endpoint), s2 = try EventStreamClient(endpoint)
        #expect(s1.status == 200 && s2.status == 200)
        let third = try EventStreamClient(endpoint)
        #expect(third.status == 503)
        #expect(third.headers["retry-after"] == "5")
        #expect(third.body.contains("too many event streams"))
        #expect(try HTTPClient(endpoint).request("GET", "/healthz").status == 200)
        #expect(agent.process.isRunning)
    }

    // L.2: RequestReadTimeout bounds the whole request, body included: a client that
    // drips its body is closed at the deadline however steadily it drips.
    @Test func oneDeadlinePerRequestBodyIncluded() throws {
        let (_, agent, endpoint) = try http.start(extra: "RequestReadTimeout=1s")
        let drip = try HTTPClient(endpoint)
        drip.sendBytes(Array("POST \(Self.bulk) HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n".utf8))
        let started = Date()
        var byte: UInt8 = 0
        // A byte every 0.1 s until the agent closes the connection (or 4 s go by).
        while Date().timeIntervalSince(started) < 4, recv(drip.fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) != 0 {
            drip.sendBytes([UInt8(ascii: " ")])
            usleep(100_000)
        }
        let took = Date().timeIntervalSince(started)
        #expect(drip.readsEOF(timeout: 1))
        #expect(took < 3.5, "a dripping body held its connection \(took) s past RequestReadTimeout=1s")
        let text = try HTTPClient(endpoint).request("GET", "/metrics").body
        #expect(metric(text, "pushwoosh_agent_request_read_timeouts_total{door=\"http\"}") ?? 0 >= 1)
        #expect(agent.process.isRunning)
    }

    // L.2: clients that never finish a request cannot hold the budget: at MaxConnections a
    // new connection takes the place of the one that has waited longest, so /healthz and a
    // token holder are served while slow clients wait.
    @Test func slowClientsCannotHoldTheBudget() throws {
        let dir = TempDir(files: ["token": "budget-token"])
        let tokenFile = dir.file("token")
        let (_, agent, endpoint) = try http.start(http: "MaxConnections=3\nTokenFile=\(tokenFile)")
        var slow: [HTTPClient] = []
        for _ in 0..<6 {
            let client = try HTTPClient(endpoint)
            client.sendBytes(Array("POST \(Self.bulk) HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n{".utf8))
            slow.append(client)
            usleep(20_000)
        }
        for _ in 0..<3 {
            #expect(try HTTPClient(endpoint).request("GET", "/healthz", headers: ["Authorization": "Bearer budget-token"]).status == 200)
            let holder = try HTTPClient(endpoint).request("POST", Self.bulk, headers: ["Authorization": "Bearer budget-token"], body: Self.context)
            #expect(holder.status == 200)
        }
        #expect(slow[0].readsEOF(timeout: 2), "the oldest slow client keeps its slot")
        let text = try HTTPClient(endpoint).request("GET", "/metrics", headers: ["Authorization": "Bearer budget-token"]).body
        #expect(metric(text, "pushwoosh_agent_http_connections_evicted_total") ?? 0 >= 3)
        #expect(agent.process.isRunning)
    }

    // L.2: one reading of each request: two Content-Lengths are a 400 naming the problem; an
    // encoded control character is part of the key (never another key: not found); a path
    // that decodes to no UTF-8 is a 400.
    @Test func requestsWithTwoReadingsAreRefused() throws {
        let (_, agent, endpoint) = try http.start()
        let h = try HTTPClient(endpoint)
        h.sendBytes(Array("POST \(HTTPInterfaceTests.single)new_checkout HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 14\r\n\r\n{}".utf8))
        let two = h.readResponse()
        #expect(two.status == 400)
        #expect(two.body.contains("more than one Content-Length"))
        for (encoded, key) in [("new_checkout%00", "new_checkout\u{0}"), ("new_checkout%0A", "new_checkout\n"), ("new%7Fcheckout", "new\u{7F}checkout")] {
            let r = try HTTPClient(endpoint).request("POST", HTTPInterfaceTests.single + encoded, body: Self.context)
            #expect(r.status == 404, "\(encoded): \(r.status) \(r.body)")
            #expect(r.json["key"]?.stringValue == key)
            #expect(r.json["errorCode"] == "FLAG_NOT_FOUND")
        }
        let notUTF8 = try HTTPClient(endpoint).request("POST", HTTPInterfaceTests.single + "new_checkout%FF", body: Self.context)
        #expect(notUTF8.status == 400)
        #expect(notUTF8.json["key"] == "new_checkout%FF")
        #expect(notUTF8.body.contains("not UTF-8"))
        let encoded = try HTTPClient(endpoint).request("POST", HTTPInterfaceTests.single + "new%5Fcheckout", body: Self.context)
        #expect(encoded.status == 200 && encoded.json["key"] == "new_checkout", "an encoded letter is that letter")
        #expect(agent.process.isRunning)
    }

    // F.3: bounds in-process: a stream holds at most its bound unsent (beyond, it is cut),
    // and an event is the documented bytes.
    @Test func aStreamIsBoundedAndAnEventIsItsBytes() {
        let stream = EventStream()
        stream.write(Array(repeating: 0x20, count: EventStream.maximumPendingBytes - 10))
        #expect(!stream.finished)
        stream.write(Array(repeating: 0x20, count: 11))
        #expect(stream.finished, "a reader that falls behind by more than the bound is cut")
        let event = String(decoding: OFREPEvents.event(id: 7, etag: "\"ab\"", lastModified: Date(timeIntervalSince1970: 1_771_622_898.9)), as: UTF8.self)
        #expect(event == "event: message\nid: 7\ndata: {\"etag\":\"\\\"ab\\\"\",\"lastModified\":1771622898,\"type\":\"refetchEvaluation\"}\n\n")
        let none = String(decoding: OFREPEvents.event(id: 8, etag: nil, lastModified: Date(timeIntervalSince1970: 5)), as: UTF8.self)
        #expect(none == "event: message\nid: 8\ndata: {\"lastModified\":5,\"type\":\"refetchEvaluation\"}\n\n")
    }

    @Test func percentDecoding() {
        #expect(LoopHTTPServer.percentDecoded(Array("a%20b".utf8)) == "a b")
        #expect(LoopHTTPServer.percentDecoded(Array("%zz%4".utf8)) == "%zz%4", "a % without two hex digits stays")
        #expect(LoopHTTPServer.percentDecoded(Array("%C3%A9".utf8)) == "é")
        #expect(LoopHTTPServer.percentDecoded(Array("k%00".utf8)) == "k\u{0}", "an encoded NUL is kept, not an end")
        #expect(LoopHTTPServer.percentDecoded(Array("k%1f".utf8)) == "k\u{1F}")
        #expect(LoopHTTPServer.percentDecoded(Array("k%FF".utf8)) == nil, "not UTF-8")
        #expect(LoopHTTPServer.percentDecoded(Array("%C3".utf8)) == nil, "half a character")
    }
}

/// One `GET /ofrep/v1/events` on its own connection: the answer's head, then its events as
/// they come (chunked transfer decoded).
final class EventStreamClient {
    private let fd: Int32
    private(set) var status = 0
    private(set) var headers: [String: String] = [:]
    private(set) var body = ""
    private var raw: [UInt8] = []
    private var text = ""

    struct Event {
        var fields: [String: String]
    }

    init(_ endpoint: HTTPEndpoint, headers extra: [String: String] = [:]) throws {
        switch endpoint {
        case .unix(let path): fd = try UnixSocket.connect(to: path).take()
        case .tcp(let port):
            guard let connected = try? BlockingSocket.connectTCP(port: port) else { throw FixtureError("cannot connect to port \(port)") }
            fd = connected
        }
        var head = "GET /ofrep/v1/events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
        for (k, v) in extra { head += "\(k): \(v)\r\n" }
        try BlockingSocket.sendAll(fd, Array((head + "\r\n").utf8))
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline, raw.firstRange(of: Array("\r\n\r\n".utf8)) == nil { guard receive(timeout: 0.2) else { break } }
        guard let end = raw.firstRange(of: Array("\r\n\r\n".utf8)) else { return }
        let lines = String(decoding: raw[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        status = Int(lines.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        raw.removeSubrange(..<end.upperBound)
        if status != 200 {  // a plain answer with Content-Length
            let length = Int(headers["content-length"] ?? "0") ?? 0
            while raw.count < length, receive(timeout: 1) {}
            body = String(decoding: raw.prefix(length), as: UTF8.self)
        }
    }

    deinit { close() }

    private var closed = false
    func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }

    /// Reads what comes within `timeout`; false on the end of the connection or nothing.
    private func receive(timeout: Double) -> Bool {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, Int32(timeout * 1000)) > 0 else { return false }
        var buffer = [UInt8](repeating: 0, count: 65536)
        let n = recv(fd, &buffer, buffer.count, 0)
        guard n > 0 else { return false }
        raw += buffer[..<n]
        return true
    }

    /// Decodes the complete chunks received so far into `text`.
    private func decodeChunks() {
        while let lineEnd = raw.firstRange(of: Array("\r\n".utf8)) {
            let size = Int(String(decoding: raw[..<lineEnd.lowerBound], as: UTF8.self), radix: 16) ?? 0
            guard raw.count >= lineEnd.upperBound + size + 2 else { return }
            text += String(decoding: raw[lineEnd.upperBound..<(lineEnd.upperBound + size)], as: UTF8.self)
            raw.removeSubrange(..<(lineEnd.upperBound + size + 2))
        }
    }

    /// The stream's text received within `timeout` (default: what is there now).
    func readAvailable(timeout: Double = 0.05) -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while receive(timeout: max(0, deadline.timeIntervalSinceNow)) {}
        decodeChunks()
        defer { text = "" }
        return text
    }

    /// The events (blocks with a `data` field; comments skipped) that come within `seconds`,
    /// returning early once `atLeast` have come.
    func events(within seconds: Double, atLeast: Int = .max) -> [Event] {
        let deadline = Date().addingTimeInterval(seconds)
        var pending = ""
        var found: [Event] = []
        while Date() < deadline, found.count < atLeast {
            _ = receive(timeout: min(0.1, max(0, deadline.timeIntervalSinceNow)))
            decodeChunks()
            pending += text
            text = ""
            while let end = pending.range(of: "\n\n") {
                let block = pending[..<end.lowerBound]
                pending.removeSubrange(..<end.upperBound)
                var fields: [String: String] = [:]
                for line in block.split(separator: "\n") where !line.hasPrefix(":") {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    fields[String(line[..<colon])] = String(line[line.index(after: colon)...].drop { $0 == " " })
                }
                if fields["data"] != nil { found.append(Event(fields: fields)) }
            }
        }
        return found
    }
}
