import AgentCore
import EmulatorCore
import Foundation
import Lab
import MicroHTTPD

/// `--lab DIR` (docs/lab.md M): the lab's service over this server, and its requests handed to
/// it with their connections suspended until the answer comes.
extension EmulatorServer {
    /// `--lab DIR`, made ready (`LabDirectory.prepare`): the daemon found (`--agentd PATH`, else
    /// beside this binary, else on `PATH`), the lab started.
    public func startLab(_ directory: PrivateDirectory, agentd: String?) throws(EmulatorServerError) {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        guard let daemon = agentd ?? LabService.defaultAgentd(besides: executable) else {
            throw EmulatorServerError(description: "--lab: no pushwoosh-agentd beside \(executable) or on PATH; name it with --agentd PATH")
        }
        guard LabService.isExecutableFile(daemon) else {
            throw EmulatorServerError(description: "--agentd \(daemon): not an executable file")
        }
        startLab(directory: directory, agentd: daemon)
    }

    private func startLab(directory: PrivateDirectory, agentd: String) {
        let admin: @Sendable (String, String, JSONValue?) -> (status: Int, body: JSONValue) = { [self] method, path, body in
            let outcome = state.withLock { state in
                // The lab's own call, in-process: it carries the admin token the `/lab/*` request
                // it serves was let in with (an emulator started with --admin-token locks both).
                let token = state.configuration.adminToken.map { [HTTPHeader("Authorization", "Bearer " + $0)] } ?? []
                let request = EmulatorRequest(method: method, path: path, headers: token, body: body.map { JSONWriter.encode($0) } ?? [])
                return state.handle(PreparedRequest(request), now: clock.now())
            }
            guard let response = outcome.render() else { return (0, .null) }
            return (response.status, response.jsonBody ?? .null)
        }
        let scheme = tls == nil ? "http" : "https"
        let emulator = LabEmulator(serverURL: "\(scheme)://\(host == "0.0.0.0" ? "127.0.0.1" : host):\(port)/json/1.3/", admin: admin)
        labService.withLock { $0 = LabService(directory: directory, agentd: agentd, emulator: emulator) }
        log?("lab started dir=\(directory.path) agentd=\(agentd)")
    }

    /// Stops the lab's owned devices (the emulator's stop; a SIGKILL of the emulator ends them
    /// through their parent-death signal).
    public func stopLab() {
        labService.withLock { $0 }?.shutdown()
    }

    /// Whether the lab answers `request` rather than the emulator: `/lab/*`, and a fault armed by
    /// a lab device's name (`POST /admin/faults {"device": NAME}`), whose HWID only the lab knows.
    func isForLab(_ request: EmulatorRequest) -> Bool {
        if LabCommand.isLab(request.path) { return true }
        guard request.method == "POST", request.path == "/admin/faults", labService.withLock({ $0 }) != nil else { return false }
        return (try? StrictJSONParser.parse(request.body))?["device"] != nil
    }

    /// A `/lab/*` request: handed to the lab, its connection suspended until the answer.
    func lab(_ request: EmulatorRequest, _ connection: OpaquePointer, _ ctx: RequestContext) -> MHD_Result {
        guard let lab = labService.withLock({ $0 }) else {
            let off = EmulatorResponse.json(404, .object(["error": .string("the lab is off: start pushwoosh-emulator with --lab DIR (docs/lab.md M)")]))
            return send(off, .normal, on: connection)
        }
        guard let key = suspendConnection(connection) else { return MHD_Result.NO }
        ctx.pending = .parked(key)
        if verbose { log?("lab request method=\(request.method) path=\(request.path)") }
        lab.handle(request) { [self] response in resume(key, answer: response) }
        return MHD_Result.YES
    }
}
