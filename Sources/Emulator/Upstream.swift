import AgentCore
import AgentCurl
import EmulatorCore
import Foundation

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
        if let recorder, let failure = recorder.append(started: started, milliseconds: ms, url: url, request: headers,
                                                       requestBody: request.body, response: response, method: method) {
            log?("record failed file=\(recorder.path) error=\(failure)")
        }
        return response
    }
}
