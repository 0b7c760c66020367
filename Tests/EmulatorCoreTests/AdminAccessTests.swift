import AgentCore
import EmulatorCore
import Foundation
import Testing

/// `--admin-token` and the request log's redaction, on the pure state.
@Suite struct AdminAccessTests {
    static let admin = "adm1n-t0ken"
    static let api = "ap1-t0ken"

    func state() throws -> EmulatorState {
        EmulatorState(configuration: EmulatorConfiguration(requireToken: Self.api, adminToken: Self.admin),
                      apps: [try Application(json: exampleApp)])
    }

    func request(_ verb: String, _ path: String, _ headers: [HTTPHeader] = [], body: [UInt8] = []) -> EmulatorRequest {
        EmulatorRequest(method: verb, path: path, headers: headers, body: body)
    }

    @Test("The admin API needs Authorization: Bearer TOKEN; every other form is a 401 naming what is needed")
    func adminNeedsTheToken() throws {
        var s = try state()
        let before = JSONWriter.string(s.document.json)
        let refused: [[HTTPHeader]] = [
            [], [HTTPHeader("Authorization", "")], [HTTPHeader("Authorization", "Bearer")],
            [HTTPHeader("Authorization", "Bearer wrong")], [HTTPHeader("Authorization", "Token \(Self.admin)")],
            [HTTPHeader("Authorization", "Bearer \(Self.admin)x")], [HTTPHeader("Authorization", "Bearer \(Self.admin.dropLast())")],
            [HTTPHeader("X-API-Key", Self.admin)], [HTTPHeader("Authorization", "Basic \(Self.admin)")],
        ]
        for headers in refused {
            for (verb, path) in [("GET", "/admin/apps"), ("DELETE", "/admin/apps/ABCDE-12345"), ("POST", "/admin/reset"),
                                 ("GET", "/admin/requests"), ("GET", "/admin/nope"), ("GET", "/admin")] {
                let o = s.handle(request(verb, path, headers), now: t0)
                #expect(o.status == 401, "\(verb) \(path) \(headers)")
                #expect(o.json?["error"] == "the admin API needs Authorization: Bearer TOKEN (--admin-token)")
                #expect(o.headers.contains(HTTPHeader("WWW-Authenticate", "Bearer")))
            }
        }
        #expect(JSONWriter.string(s.document.json) == before)  // nothing changed
        for value in ["Bearer \(Self.admin)", "bearer \(Self.admin)", "BEARER  \(Self.admin) "] {
            #expect(s.handle(request("GET", "/admin/apps", [HTTPHeader("authorization", value)]), now: t0).status == 200, "\(value)")
        }
        // The device API is not the admin API: its own token, not this one.
        let device = request("POST", "/json/1.3/getFeatureFlags", [HTTPHeader("Authorization", "Token \(Self.api)")],
                             body: JSONWriter.encode(["request": ["application": "ABCDE-12345", "hwid": "h1"]]))
        #expect(s.handle(device, now: t0).status == 200)
        // "/administrator" is not under /admin.
        #expect(s.handle(request("GET", "/administrator"), now: t0).status == 404)
    }

    @Test("Without --admin-token the admin API is open, as before")
    func noTokenNoCheck() throws {
        var s = EmulatorState(apps: [try Application(json: exampleApp)])
        #expect(s.handle(request("GET", "/admin/apps"), now: t0).status == 200)
    }

    @Test("The request log never shows an Authorization value or either token")
    func requestLogIsRedacted() throws {
        var s = try state()
        let body = JSONWriter.encode(["request": ["application": "ABCDE-12345", "hwid": "h1", "note": .string("a \(Self.api) b"),
                                                  .init(stringLiteral: Self.admin): .string(Self.admin)]])
        for auth in ["Token \(Self.api)", "Token wrong-one", "Bearer \(Self.admin)", "garbage"] {
            _ = s.handle(request("POST", "/json/1.3/getFeatureFlags",
                                 [HTTPHeader("Authorization", auth), HTTPHeader("X-Echo", "x\(Self.api)y")], body: body), now: t0)
        }
        let log = s.handle(request("GET", "/admin/requests", [HTTPHeader("Authorization", "Bearer \(Self.admin)")]), now: t0)
        let text = String(decoding: log.render()!.body, as: UTF8.self)
        #expect(!text.contains(Self.api) && !text.contains(Self.admin))
        #expect(!text.contains("wrong-one") && !text.contains("garbage"))
        let shown = log.json?["requests"]?.arrayValue?.map { $0["headers"]?["Authorization"]?.stringValue }
        #expect(shown == ["Token [redacted]", "Token [redacted]", "Bearer [redacted]", "[redacted]"])
        let first = log.json?["requests"]?.arrayValue?.first
        #expect(first?["headers"]?["X-Echo"] == "x[redacted]y")
        #expect(first?["body"]?["request"]?["note"] == "a [redacted] b")
        #expect(first?["body"]?["request"]?["[redacted]"] == "[redacted]")
        // The calls were still judged on the real header: one 200, three 401.
        #expect(log.json?["requests"]?.arrayValue?.map { $0["status"] } == [200, 401, 401, 401])
    }

    @Test func bodyLimitsByRoute() {
        #expect(EmulatorConfiguration.maxBodyBytes(path: "/json/1.3/getFeatureFlags") == 1 << 20)
        #expect(EmulatorConfiguration.maxBodyBytes(path: "/admin/apps/X") == 8 << 20)
        #expect(EmulatorConfiguration.maxBodyBytes(path: "/anything") == 1 << 20)
    }
}
