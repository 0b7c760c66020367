import AgentCore
import EmulatorCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A real HTTP client (URLSession over libcurl) for the emulator's tests.
struct Client {
    let base: String
    let port: UInt16
    let session: URLSession

    init(port: UInt16) {
        self.port = port
        base = "http://127.0.0.1:\(port)"
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 10
        session = URLSession(configuration: configuration)
    }

    struct Reply {
        var status: Int
        var headers: [String: String]
        var body: Data
        var json: JSONValue? { try? StrictJSONParser.parse([UInt8](body)) }
        var text: String { String(decoding: body, as: UTF8.self) }
        func header(_ name: String) -> String? {
            headers.first { $0.key.lowercased() == name.lowercased() }?.value
        }
    }

    func send(_ verb: String, _ path: String, body: Data? = nil, headers: [String: String] = [:]) async throws -> Reply {
        var request = URLRequest(url: URL(string: base + path)!)
        request.httpMethod = verb
        request.httpBody = body
        if body != nil { request.setValue("application/json; charset=utf-8", forHTTPHeaderField: "Content-Type") }
        for (k, v) in headers { request.setValue(v, forHTTPHeaderField: k) }
        let (data, response) = try await session.data(for: request)
        let http = response as! HTTPURLResponse
        var out: [String: String] = [:]
        for (k, v) in http.allHeaderFields { out["\(k)"] = "\(v)" }
        return Reply(status: http.statusCode, headers: out, body: data)
    }

    func send(_ verb: String, _ path: String, json: JSONValue, headers: [String: String] = [:]) async throws -> Reply {
        try await send(verb, path, body: Data(JSONWriter.encode(json)), headers: headers)
    }

    /// A device API call with the common fields of docs/device-api.md A.1.
    func device(_ method: String, _ fields: [String: JSONValue] = [:], hwid: String = "hw-1",
                app: String = "ABCDE-12345", headers: [String: String] = [:]) async throws -> Reply {
        var request: [String: JSONValue] = ["application": .string(app), "hwid": .string(hwid), "userId": .string(hwid),
                                            "v": "7.2.10", "device_type": 1]
        request.merge(fields) { _, new in new }
        return try await send("POST", "/json/1.3/\(method)", json: ["request": .object(request)], headers: headers)
    }
}
