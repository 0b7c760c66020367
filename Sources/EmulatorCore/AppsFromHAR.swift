import AgentCore

/// `pushwoosh-emulator --apps-from-har FILE.har`: an `--apps` definition (D.1) that serves
/// every device the flags of the last `getFeatureFlags` answer recorded for each application:
/// an enabled flag gets a rule with the recorded `rule_id` that matches every device, a killed
/// one (`rule_id` "") `killed: true`, one off by default no rule; the recorded properties are
/// the defaults, their types read from the JSON kinds. An answer without `flags` gives
/// `featureFlagsInPlan: false`.
public enum AppsFromHAR {
    public static func definitions(_ har: JSONValue) throws(DefinitionError) -> JSONValue {
        var last: [String: JSONValue] = [:]
        var order: [String] = []
        for entry in try HAR.entries(har) where entry.method == PushwooshAPI.Method.getFeatureFlags.rawValue {
            guard entry.answer.status == 200, let envelope = try? StrictJSONParser.parse(entry.answer.body),
                  envelope["status_code"]?.numberValue == 200, let response = envelope["response"], response.objectValue != nil,
                  let code = entry.request?["request"]?["application"]?.stringValue else { continue }
            if last[code] == nil { order.append(code) }
            last[code] = response
        }
        guard !order.isEmpty else {
            throw DefinitionError([.key("log"), .key("entries")], "no successful getFeatureFlags answer with an application code")
        }
        let apps = order.map { application($0, last[$0]!) }
        return apps.count == 1 ? apps[0] : .array(apps)
    }

    static func application(_ code: String, _ response: JSONValue) -> JSONValue {
        guard let flags = response["flags"]?.arrayValue else {
            return .object(["code": .string(code), "featureFlagsInPlan": .bool(false), "flags": .array([])])
        }
        var byKey: [String: JSONValue] = [:]
        var keys: [String] = []
        for flag in flags {
            guard let key = flag["key"]?.stringValue, let enabled = flag["enabled"]?.boolValue else { continue }
            let ruleId = flag["rule_id"]?.stringValue ?? ""
            var properties: [String: JSONValue] = [:]
            for (name, value) in flag["properties"]?.objectValue ?? [:] {
                let type = switch value {
                case .string: "string"
                case .number: "number"
                case .bool: "boolean"
                default: "json"
                }
                properties[name] = .object(["type": .string(type), "default": value])
            }
            var definition: [String: JSONValue] = ["key": .string(key), "properties": .object(properties)]
            if enabled {
                definition["rules"] = .array([.object(["id": .string(ruleId.isEmpty ? "recorded" : ruleId), "enabled": .bool(true)])])
            } else if ruleId.isEmpty {
                definition["killed"] = .bool(true)
            } else if ruleId != "default" {
                definition["rules"] = .array([.object(["id": .string(ruleId), "enabled": .bool(false)])])
            }
            if byKey[key] == nil { keys.append(key) }
            byKey[key] = .object(definition)  // a duplicate key: the last one wins, as in the agent
        }
        return .object(["code": .string(code), "flags": .array(keys.map { byKey[$0]! })])
    }
}
