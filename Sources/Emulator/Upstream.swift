import AgentCore
import AgentCurl
import AgentPosix
import EmulatorCore
import Foundation
import Glibc
import Synchronization

/// `--upstream URL [--record FILE.har]`: device API calls that no fault answers are sent on to
/// `URL` + method (e.g. the real Pushwoosh server), headers and body as they came, and the
/// answer goes back to the device; with a recorder, each exchange is appended to a HAR file
/// with its secrets replaced (`Redactor`). Blocking, on the libmicrohttpd worker thread that
/// serves the call.
public final class Upstream: Sendable {
    public let baseURL: String
    let recorder: HARRecorder?
    let log: (@Sendable (String) -> Void)?
    /// Request headers not passed on: the hop's own, and those libcurl sets itself.
    static let hopHeaders: Set<String> = ["host", "content-length", "connection", "accept-encoding", "expect", "transfer-encoding"]
    static let answerHeaders: Set<String> = ["content-type", "retry-after"]

    public init(baseURL: String, recorder: HARRecorder?, log: (@Sendable (String) -> Void)?) {
        self.baseURL = baseURL.hasSuffix("/") ? baseURL : baseURL + "/"
        self.recorder = recorder
        self.log = log
    }

    func forward(_ request: EmulatorRequest) -> EmulatorResponse {
        let method = request.path.split(separator: "/").last.map(String.init) ?? ""
        let url = baseURL + method
        let headers = request.headers.filter { !Self.hopHeaders.contains($0.name.lowercased()) }.map { HTTPHeader($0.name, $0.value) }
        let started = Date()
        // Bounded as the agent reads answers (16 MiB, 30 s): an endless or huge answer ends as a 502.
        let result = CurlProbe.exchange(HTTPRequest(url: url, headers: headers, body: Data(request.body), timeout: 30),
                                        network: NetworkOptions(), userAgent: "pushwoosh-emulator (upstream)",
                                        maximumBodyBytes: CurlTransport.defaultMaximumBodyBytes)
        let ms = Int((result.total * 1000).rounded())
        let response: EmulatorResponse
        switch result.outcome {
        case .response(let status, let answerHeaders, let body):
            let kept = answerHeaders.filter { Self.answerHeaders.contains($0.key) }.sorted { $0.key < $1.key }
                .map { HTTPHeader($0.key == "content-type" ? "Content-Type" : "Retry-After", $0.value) }
            response = EmulatorResponse(status: status, headers: kept, body: Array(body))
            log?("upstream method=\(method) status=\(status) ms=\(ms)")
        case .noResponse(let reason):
            let envelope: JSONValue = .object(["status_code": .number(502), "status_message": .string("upstream: \(reason)"),
                                               "response": .null])
            response = .json(502, envelope)
            log?("upstream method=\(method) failed reason=\(reason)")
        }
        if let recorder, let failure = recorder.append(started: started, milliseconds: ms, url: url, request: request.headers,
                                                       requestBody: request.body, response: response, method: method) {
            log?("record failed file=\(recorder.path) error=\(failure)")
        }
        return response
    }
}

/// A HAR 1.2 file that grows by one entry per exchange. The whole file is written again
/// (to a temporary file, then renamed) after each entry, so it is a valid HAR at every moment;
/// an existing file's entries are kept and added to.
public final class HARRecorder: Sendable {
    public let path: String
    private let state: Mutex<(entries: [JSONValue], redactor: Redactor)>

    public init(path: String) throws(EmulatorServerError) {
        self.path = path
        var entries: [JSONValue] = []
        if let data = FileManager.default.contents(atPath: path), !data.isEmpty {
            do throws(DefinitionError) {
                let har = try StrictJSONParser.parse([UInt8](data))
                guard let list = har["log"]?["entries"]?.arrayValue else {
                    throw DefinitionError([.key("log"), .key("entries")], "missing (expected a HAR 1.2 log)")
                }
                entries = list
            } catch {
                throw EmulatorServerError(description: "--record: \(path): \(error.description)")
            }
        }
        state = Mutex((entries, Redactor()))
        do {
            try write(entries)
        } catch {
            throw EmulatorServerError(description: "--record: cannot write \(path): \(error)")
        }
    }

    /// Adds one exchange and writes the file; what went wrong writing it, else nil.
    func append(started: Date, milliseconds: Int, url: String, request: [HTTPHeader], requestBody: [UInt8],
                response: EmulatorResponse, method: String) -> String? {
        state.withLock { s in
            s.redactor.learn(headers: request, body: requestBody)
            let r = s.redactor
            let kept = request.filter { !Upstream.hopHeaders.contains($0.name.lowercased()) }
            let entry = HAR.entry(started: started, milliseconds: milliseconds, url: r.redact(url),
                                  requestHeaders: r.redact(kept), requestBody: r.redactBody(requestBody),
                                  status: response.status, responseHeaders: r.redact(response.headers),
                                  responseBody: r.redactBody(response.body), method: method)
            s.entries.append(entry)
            do {
                try write(s.entries)
                return nil
            } catch {
                return "\(error)"
            }
        }
    }

    private func write(_ entries: [JSONValue]) throws {
        var log = HAR.emptyLog()
        if case .object(var top) = log, case .object(var inner)? = top["log"] {
            inner["entries"] = .array(entries)
            top["log"] = .object(inner)
            log = .object(top)
        }
        let temporary = path + ".tmp"
        try Data(JSONWriter.encode(log)).write(to: URL(fileURLWithPath: temporary))
        guard rename(temporary, path) == 0 else {
            throw EmulatorServerError(description: "rename \(temporary): \(String(cString: strerror(errno)))")
        }
    }
}
