import AgentCore
import Foundation
import HarnessSupport
import Testing

/// docs/lab.md "The contract", against the real binary: a running lab serves docs/lab-openapi.json
/// byte for byte at `GET /lab/openapi.json`, behind its token like the rest of `/lab`.
@Suite(.serialized) struct LabOpenAPITests {
    static let file = Binaries.repositoryRoot + "/docs/lab-openapi.json"

    @Test func aRunningLabServesTheDocumentInTheTree() async throws {
        let dir = TempDir()
        let emulator = try EmulatorProcess(arguments: ["--lab", dir.file("lab")])
        let token = try #require(emulator.token)
        let client = Client(port: UInt16(emulator.port))
        let served = try await client.send("GET", "/lab/openapi.json", headers: ["Authorization": "Bearer \(token)"])
        #expect(served.status == 200)
        #expect(served.header("Content-Type") == "application/json")
        let expected = try Data(contentsOf: URL(fileURLWithPath: Self.file))
        #expect(served.body == expected, "GET /lab/openapi.json is not docs/lab-openapi.json (\(served.body.count) bytes, the file \(expected.count))")
        // Locked like the rest of the lab; GET only.
        #expect(try await client.send("GET", "/lab/openapi.json").status == 401)
        #expect(try await client.send("POST", "/lab/openapi.json", headers: ["Authorization": "Bearer \(token)"]).status == 405)
        #expect(try await client.send("GET", "/lab/openapi.json?x=1", headers: ["Authorization": "Bearer \(token)"]).status == 400)
    }

    /// A method a lab path does not take is a 405 that says which it takes (`Allow`, RFC 9110), as
    /// the admin API's are: schemathesis's unsupported_method check found the lab's without one.
    @Test func aMethodALabPathDoesNotTakeIsA405WithAllow() async throws {
        let dir = TempDir()
        let emulator = try EmulatorProcess(arguments: ["--lab", dir.file("lab")])
        let client = Client(port: UInt16(emulator.port))
        let token = ["Authorization": "Bearer \(try #require(emulator.token))"]
        for (method, path, allow) in [("PUT", "/lab/devices", "GET, POST"), ("POST", "/lab/openapi.json", "GET"),
                                      ("PATCH", "/lab/devices/qa-0", "GET, DELETE"), ("GET", "/lab/advance", "POST"),
                                      ("DELETE", "/lab/devices/qa-0/log", "GET"), ("PATCH", "/admin/apps", "GET")] {
            let answer = try await client.send(method, path, headers: token)
            #expect(answer.status == 405 && answer.header("Allow") == allow, "\(method) \(path): \(answer.status) Allow: \(answer.header("Allow") ?? "none")")
        }
    }

    /// An advance `until` a time more than a year on is refused as `seconds` is (a 400 at `until`);
    /// it was a 502 without a device, and with one an advance that stepped through every timer up to
    /// then and never ended, holding the lab (a reset, a SIGTERM) behind it.
    @Test func anAdvanceUntilMoreThanAYearOnIsA400() throws {
        let dir = TempDir()
        let emulator = try EmulatorProcess(arguments: ["--lab", dir.file("lab")])
        for until in ["9999-01-01T00:00:00Z", "99999999999"] {
            let (status, text) = emulator.admin("POST", "/lab/advance", #"{"until":"\#(until)"}"#)
            #expect(status == 400 && (try? JSONReader.parse(text))?["path"] == "until", "no device, until \(until): \(status) \(text)")
        }
        #expect(emulator.admin("POST", "/lab/devices", #"{"name":"a"}"#).0 == 201)
        for until in ["9999-01-01T00:00:00Z", "99999999999"] {
            let (status, text) = emulator.admin("POST", "/lab/advance", #"{"until":"\#(until)"}"#)
            #expect(status == 400 && (try? JSONReader.parse(text))?["path"] == "until", "until \(until): \(status) \(text)")
        }
        let now = try #require(JSONReader.parse(emulator.admin("GET", "/admin/clock").1)["unixTime"]?.numberValue)
        let (status, text) = emulator.admin("POST", "/lab/advance", #"{"until":"\#(Int(now) + 120)"}"#)
        #expect(status == 200, "\(text)")
        #expect(emulator.admin("POST", "/lab/reset").0 == 200)
    }

    /// An `agentd` that is no executable file (a directory, a file without the x bit, nothing) is the
    /// caller's mistake, a 400 naming `agentd` before anything starts, as the document says; it was
    /// a 502 ("did not start: it exited (exit code 126)").
    @Test func anAgentdThatIsNoExecutableFileIsA400NamingIt() throws {
        let dir = TempDir(files: ["plain": "#!/bin/sh\n"])
        let emulator = try EmulatorProcess(arguments: ["--lab", dir.file("lab")])
        for agentd in [dir.path, dir.file("plain"), dir.file("missing")] {
            let (status, text) = emulator.admin("POST", "/lab/devices", #"{"name":"x","agentd":"\#(agentd)"}"#)
            let answer = try JSONReader.parse(text)
            #expect(status == 400 && answer["path"] == "agentd", "\(agentd): \(status) \(text)")
        }
        #expect(emulator.admin("GET", "/lab/devices").1 == #"{"devices":[]}"#)
    }
}
