import AgentCore
import Foundation

extension EmulatorState {
    // MARK: - Admin API (docs/emulator.md D.2)

    mutating func admin(_ p: PreparedRequest, now: Date) -> Outcome {
        let verb = p.request.method
        switch p.route {
        case .apps:
            return .json(200, .object(["apps": .array(apps.keys.sorted().map { apps[$0]!.json })]))
        case .app(let code):
            return app(code, verb: verb, body: Self.body(p))
        case .flag(let code, let key):
            return flag(code, key, verb: verb, body: Self.body(p))
        case .flagAction(let code, let key, let action):
            return flagAction(code, key, action)
        case .faults:
            return faults(verb: verb, body: Self.body(p), now: now)
        case .requests:
            return requests(verb: verb, query: p.request.query)
        case .devices:
            if verb == "DELETE" {
                devices.removeAll()
                return .json(200, .object(["cleared": true]))
            }
            return .json(200, .object(["devices": .array(devices.keys.sorted().map { devices[$0]!.json })]))
        case .device, .notFound, .requestsWait, .requestsCount, .clock, .reset, .state, .lab:
            return .error(404, "no such route: \(p.request.path)")
        }
    }

    private static func body(_ p: PreparedRequest) -> Result<JSONValue, DefinitionError> {
        p.json ?? .failure(DefinitionError([], "empty body (expected JSON)"))
    }

    /// `GET`, `PUT`, `DELETE /admin/apps/{code}`.
    private mutating func app(_ code: String, verb: String, body: Result<JSONValue, DefinitionError>) -> Outcome {
        switch verb {
        case "GET":
            guard let app = apps[code] else { return .error(404, "no application \"\(code)\"") }
            return .json(200, app.json)
        case "PUT":
            do throws(DefinitionError) {
                let app = try Application(json: body.get(), expectedCode: code)
                let replaced = apps[code] != nil
                apps[code] = app
                return .json(200, app.json,
                             events: ["app \(replaced ? "replaced" : "loaded") code=\(code) flags=\(app.flags.count)"])
            } catch {
                return .invalid(error)
            }
        default:
            guard apps.removeValue(forKey: code) != nil else { return .error(404, "no application \"\(code)\"") }
            return .json(200, .object(["deleted": .string(code)]), events: ["app removed code=\(code)"])
        }
    }

    /// `GET`, `PUT`, `DELETE /admin/apps/{code}/flags/{key}`.
    private mutating func flag(_ code: String, _ key: String, verb: String, body: Result<JSONValue, DefinitionError>) -> Outcome {
        guard var app = apps[code] else { return .error(404, "no application \"\(code)\"") }
        switch verb {
        case "GET":
            guard let flag = app.flag(key) else { return .error(404, "no flag \"\(key)\" in application \"\(code)\"") }
            return .json(200, flag.json)
        case "PUT":
            do throws(DefinitionError) {
                let flag = try FlagDefinition(json: body.get(), expectedKey: key)
                app.upsert(flag)
                apps[code] = app
                return .json(200, flag.json, events: ["flag replaced code=\(code) key=\(key)"])
            } catch {
                return .invalid(error)
            }
        default:
            guard app.flag(key) != nil else { return .error(404, "no flag \"\(key)\" in application \"\(code)\"") }
            app.flags.removeAll { $0.key == key }
            apps[code] = app
            return .json(200, .object(["deleted": .string(key)]), events: ["flag removed code=\(code) key=\(key)"])
        }
    }

    /// `POST /admin/apps/{code}/flags/{key}/kill` (`unkill`, `archive`, `unarchive`).
    private mutating func flagAction(_ code: String, _ key: String, _ action: FlagAction) -> Outcome {
        guard var app = apps[code] else { return .error(404, "no application \"\(code)\"") }
        guard let k = app.flags.firstIndex(where: { $0.key == key }) else {
            return .error(404, "no flag \"\(key)\" in application \"\(code)\"")
        }
        switch action {
        case .kill: app.flags[k].killed = true
        case .unkill: app.flags[k].killed = false
        case .archive: app.flags[k].archived = true
        case .unarchive: app.flags[k].archived = false
        }
        apps[code] = app
        return .json(200, app.flags[k].json, events: ["flag \(action.rawValue) code=\(code) key=\(key)"])
    }

    /// `GET`, `POST`, `DELETE /admin/faults`.
    private mutating func faults(verb: String, body: Result<JSONValue, DefinitionError>, now: Date) -> Outcome {
        switch verb {
        case "GET":
            faults.expire(now)
            return .json(200, .object(["faults": .array(faults.armed(at: now).map(\.json)), "now": .string(Timestamp.format(now))]))
        case "POST":
            do throws(DefinitionError) {
                let fault = try Fault(json: body.get())
                let entry = faults.arm(fault, now: now)
                return .json(200, .object(["armed": entry.json]),
                             events: ["fault armed method=\(fault.method) kind=\(fault.kind.name) times=\(fault.times.map(String.init) ?? "unlimited") "
                                      + "delayMs=\(fault.delayMs) hwid=\(fault.hwid ?? "-") userId=\(fault.userId ?? "-") "
                                      + "forSeconds=\(fault.forSeconds.map { "\($0)" } ?? "-") probability=\(fault.probability.map { "\($0)" } ?? "-")"])
            } catch {
                return .invalid(error)
            }
        default:
            faults.clear()
            return .json(200, .object(["cleared": true]), events: ["faults cleared"])
        }
    }

    /// `GET`, `DELETE /admin/requests`.
    private mutating func requests(verb: String, query: [String: String]) -> Outcome {
        if verb == "DELETE" {
            requestLog.clear()
            recountParkedWaits()
            return .json(200, .object(["cleared": true]))
        }
        do throws(DefinitionError) {
            let selected = requestLog.select(try RequestFilter(query: query))
            return .json(200, .object(["requests": .array(selected.map(\.json)), "count": .number(Double(selected.count))]))
        } catch {
            return .invalid(error)
        }
    }
}
