import AgentCore
import ToolSupport
import AgentWire
import Foundation

// `fleet advance-clock` against an emulator that serves a lab (`pushwoosh-emulator --lab DIR`,
// docs/lab.md M): each instance is attached under its name (not owned: the lab never stops it),
// the lab moves the emulator and those devices together (`POST /lab/advance`), and the ones
// attached here are let go again. A device the lab skipped is reported as one that did not follow.

/// The emulator's lab, as agentctl uses it.
struct FleetLabClient {
    var http: LoopbackHTTP
    /// The emulator's URL as given (for messages).
    var url: String
    /// How long `POST /lab/advance` may take: it answers once the whole span has been stepped.
    static let advanceTimeout = 3600.0

    enum Probe {
        /// The emulator serves a lab.
        case lab(FleetLabClient)
        /// `/lab/*` is a 404: no `--lab`.
        case none
        case failed(FleetAdvanceFailure)
    }

    /// Whether the emulator serves a lab (`GET /lab/devices`).
    func probe() -> Probe {
        do {
            let r = try http.call("GET", "/lab/devices")
            switch r.status {
            case 200: return .lab(self)
            case 404: return .none
            case 401:
                return .failed(FleetAdvanceFailure(.permissionDenied, "the lab at \(url) is locked: give its token with --admin-token FILE "
                                                   + "(DIR/token of pushwoosh-emulator --lab DIR, or its --admin-token); nothing was moved"))
            default: return .failed(refusal(r, "GET /lab/devices"))
            }
        } catch {
            return .failed(FleetAdvanceFailure(.notRunning, "the emulator at \(url) does not answer: \(error); nothing was moved"))
        }
    }

    /// Attaches every instance (under its name), advances them with the emulator, and lets the
    /// ones attached here go.
    func advance(_ targets: [FleetTarget], _ until: FleetAdvance.Until) -> Result<FleetAdvanced, FleetAdvanceFailure> {
        var attached: [String] = []
        var unmovable: [(name: String, reason: String)] = []
        defer { release(attached) }
        for target in targets {
            switch attach(target) {
            case .attached: attached.append(target.name)
            case .held: break
            case .unreachable(let why): unmovable.append((target.name, why))
            case .failed(let failure): return .failure(failure)
            }
        }
        // All or none: every instance the lab cannot reach is named, and nothing moves.
        if !unmovable.isEmpty {
            return .failure(FleetAdvanceFailure(.notRunning, "\(unmovable.count) of \(targets.count) instance\(targets.count == 1 ? "" : "s") "
                                                + "cannot be moved; nothing was moved", unmovable: unmovable))
        }
        let request = LabAdvanceRequest(until: until, devices: targets.map(\.name), strict: true)
        var long = http
        long.timeout = Self.advanceTimeout
        let r: LoopbackHTTP.Response
        do {
            r = try long.call("POST", "/lab/advance", json: request.json)
        } catch {
            return .failure(FleetAdvanceFailure(.notRunning, "the lab at \(url) did not answer POST /lab/advance: \(error)"))
        }
        if r.status == 409, let skipped = r.json?["skipped"]?.arrayValue, !skipped.isEmpty {
            // All or none: the lab moved nothing, and says which instances could not follow.
            let unmovable = skipped.map { ($0["name"]?.stringValue ?? "?", $0["reason"]?.stringValue ?? "?") }
            return .failure(FleetAdvanceFailure(.notRunning, "\(unmovable.count) of \(targets.count) instance\(targets.count == 1 ? "" : "s") "
                                                + "cannot be moved; nothing was moved", unmovable: unmovable))
        }
        guard r.status == 200, let answer = r.json else { return .failure(refusal(r, "POST /lab/advance")) }
        do throws(AnswerError) {
            return .success(FleetAdvanced(try LabAdvanceAnswer(json: answer)))
        } catch {
            return .failure(FleetAdvanceFailure(.agentError, "the lab's answer is not understood (\(error)): \(String(decoding: r.body.prefix(300), as: UTF8.self))"))
        }
    }

    enum Attach {
        case attached
        /// The lab holds it already under that name (409, the same socket): not ours to let go.
        case held
        /// The lab could not reach it (502: down, or no socket): why.
        case unreachable(String)
        case failed(FleetAdvanceFailure)
    }

    /// Attaches `target` as a device named as the instance.
    private func attach(_ target: FleetTarget) -> Attach {
        let socket = Self.absolute(target.socketPath)
        do {
            let r = try http.call("POST", "/lab/devices", json: ["attach": .string(socket), "name": .string(target.name)])
            if (200..<300).contains(r.status) { return .attached }
            if r.status == 502 { return .unreachable(r.json?["error"]?.stringValue ?? "does not answer at \(socket)") }
            guard r.status == 409 else { return .failed(refusal(r, "attaching \(target.name)")) }
            let held = try http.call("GET", "/lab/devices/\(target.name)")
            let device = held.json.flatMap { try? LabDeviceRecord(json: $0) }
            guard held.status == 200, device?.socket == socket else {
                let other = device.map { " (socket \($0.socket))" } ?? ""
                return .failed(FleetAdvanceFailure(.agentError, "the lab at \(url) has another device named \(target.name)\(other); nothing was moved"))
            }
            return .held
        } catch {
            return .failed(FleetAdvanceFailure(.notRunning, "the lab at \(url) did not answer: \(error); nothing was moved"))
        }
    }

    private func release(_ names: [String]) {
        for name in names { _ = try? http.call("DELETE", "/lab/devices/\(name)") }
    }

    /// A refusal of the lab's: its `error` (and `path`), 400 a usage error, 401 and 403 not
    /// allowed, anything else the lab's failure.
    private func refusal(_ r: LoopbackHTTP.Response, _ what: String) -> FleetAdvanceFailure {
        let error = r.json?["error"]?.stringValue ?? String(decoding: r.body.prefix(300), as: UTF8.self)
        let path = r.json?["path"]?.stringValue.flatMap { $0.isEmpty ? nil : " (\($0))" } ?? ""
        let exit: ExitCode = switch r.status {
        case 400: .usage
        case 401, 403: .permissionDenied
        case 502, 503: .notRunning
        default: .agentError
        }
        return FleetAdvanceFailure(exit, "the lab at \(url) refused \(what): HTTP \(r.status): \(error)\(path)")
    }

    /// `path` from the root (the lab runs in its own directory).
    static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }
}
