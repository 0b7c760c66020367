import AgentCore
import Foundation

/// Recorded device API exchanges as HAR 1.2 (`--upstream URL --record FILE.har`), their
/// secrets replaced by stable placeholders, and what a recording is read back as
/// (`--replay`, `--apps-from-har`).
public enum HAR {
    /// An empty HAR 1.2 log.
    public static func emptyLog() -> JSONValue {
        .object(["log": .object([
            "version": .string("1.2"),
            "creator": .object(["name": .string("pushwoosh-emulator"), "version": .string("1")]),
            "entries": .array([]),
        ])])
    }

    /// One exchange as a HAR entry (already redacted by the caller's `Redactor`).
    public static func entry(started: Date, milliseconds: Int, url: String, requestHeaders: [HTTPHeader], requestBody: String,
                             status: Int, responseHeaders: [HTTPHeader], responseBody: String, method: String) -> JSONValue {
        func headers(_ list: [HTTPHeader]) -> JSONValue {
            .array(list.map { .object(["name": .string($0.name), "value": .string($0.value)]) })
        }
        func mime(_ list: [HTTPHeader]) -> String {
            list.value(named: "content-type") ?? "application/json"
        }
        let ms = Double(milliseconds)
        return .object([
            "startedDateTime": .string(Timestamp.format(started)),
            "time": .number(ms),
            "comment": .string(method),
            "request": .object([
                "method": .string("POST"), "url": .string(url), "httpVersion": .string("HTTP/1.1"),
                "cookies": .array([]), "headers": headers(requestHeaders), "queryString": .array([]),
                "postData": .object(["mimeType": .string(mime(requestHeaders)), "text": .string(requestBody)]),
                "headersSize": .number(-1), "bodySize": .number(Double(requestBody.utf8.count)),
            ]),
            "response": .object([
                "status": .number(Double(status)), "statusText": .string(status == 200 ? "OK" : ""),
                "httpVersion": .string("HTTP/1.1"), "cookies": .array([]), "headers": headers(responseHeaders),
                "content": .object(["size": .number(Double(responseBody.utf8.count)), "mimeType": .string(mime(responseHeaders)),
                                    "text": .string(responseBody)]),
                "redirectURL": .string(""), "headersSize": .number(-1), "bodySize": .number(Double(responseBody.utf8.count)),
            ]),
            "cache": .object([:]),
            "timings": .object(["send": .number(0), "wait": .number(ms), "receive": .number(0)]),
        ])
    }

    /// One recorded answer: what `--replay` sends back.
    public struct Answer: Sendable, Equatable {
        public var status: Int
        public var contentType: String
        public var body: [UInt8]
    }

    /// The device API method of an entry: the last segment of its URL (`…/json/1.3/getFeatureFlags`).
    static func method(ofURL url: String) -> String? {
        guard let last = url.split(separator: "?").first?.split(separator: "/").last, !last.isEmpty else { return nil }
        return String(last)
    }

    /// The entries of a HAR file, checked enough to be replayed; errors name the entry's path.
    public static func entries(_ har: JSONValue) throws(DefinitionError) -> [(method: String, request: JSONValue?, answer: Answer)] {
        guard let entries = har["log"]?["entries"]?.arrayValue else {
            throw DefinitionError([.key("log"), .key("entries")], "missing (expected a HAR 1.2 log with entries)")
        }
        var out: [(method: String, request: JSONValue?, answer: Answer)] = []
        for (i, entry) in entries.enumerated() {
            let at: [DefinitionError.PathComponent] = [.key("log"), .key("entries"), .index(i)]
            guard let url = entry["request"]?["url"]?.stringValue, let method = method(ofURL: url) else {
                throw DefinitionError(at + [.key("request"), .key("url")], "missing (expected the device API URL)")
            }
            guard let status = entry["response"]?["status"]?.numberValue else {
                throw DefinitionError(at + [.key("response"), .key("status")], "missing (expected a number)")
            }
            // Checked as a Double before any conversion: -5, 1000 or 2^32 would not fit the
            // status line (and UInt32(-5) traps).
            guard status >= 100, status <= 999, let code = Int(exactly: status) else {
                throw DefinitionError(at + [.key("response"), .key("status")],
                                      "expected an HTTP status, a whole number 100-999, found \(JSONWriter.string(.number(status)))")
            }
            let content = entry["response"]?["content"]
            let text = content?["text"]?.stringValue ?? ""
            let type = content?["mimeType"]?.stringValue ?? "application/json"
            let request = entry["request"]?["postData"]?["text"]?.stringValue.flatMap { try? StrictJSONParser.parse($0) }
            out.append((method, request, Answer(status: code, contentType: type, body: Array(text.utf8))))
        }
        return out
    }
}

/// A recording to answer the device API from (`--replay FILE.har`): per method, the
/// answers in the order they were recorded; the last one is repeated.
public struct Recording: Sendable {
    public var answers: [String: [HAR.Answer]]

    public init(har: JSONValue) throws(DefinitionError) {
        var answers: [String: [HAR.Answer]] = [:]
        for entry in try HAR.entries(har) { answers[entry.method, default: []].append(entry.answer) }
        guard !answers.isEmpty else { throw DefinitionError([.key("log"), .key("entries")], "no device API exchange to replay") }
        self.answers = answers
    }
}

extension EmulatorState {
    /// `--upstream`: the status the upstream answered a forwarded call with (0: no answer),
    /// for `GET /admin/requests`.
    public mutating func forwardAnswered(call: Int, status: Int) {
        requestLog.setStatus(ofCall: call, status)
    }

    /// `--replay`: the next recorded answer of `method` (the last one again once all were
    /// given); a method never recorded gets an empty success envelope.
    mutating func replayAnswer(_ method: String) -> Outcome {
        guard let answers = configuration.replay?.answers[method], !answers.isEmpty else {
            return .json(200, Self.envelope(200, "OK", .object([:])),
                         events: ["replay method=\(method) not recorded: answered with an empty success"])
        }
        let index = min(replayed[method, default: 0], answers.count - 1)
        replayed[method] = index + 1
        let answer = answers[index]
        return Outcome(status: answer.status, body: .raw(answer.body, contentType: answer.contentType))
    }
}
