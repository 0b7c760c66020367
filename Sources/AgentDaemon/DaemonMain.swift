import AgentCore
import FoundationEssentials
import Glibc

/// `pushwoosh-agentd [--config FILE] [--socket PATH] [--state-dir DIR]` (docs/configuration.md C).
public enum DaemonMain {
    public static func run(arguments: [String], environment: [String: String]) -> Int32 {
        let log = Log(minimum: environment["PUSHWOOSH_AGENT_DEBUG"].map { $0.isEmpty ? .info : .debug } ?? .info,
                      journal: Log.isJournalStream(fd: 2, environment: environment))
        let command: DaemonCommand
        do {
            command = try DaemonCommandLine.parse(arguments)
        } catch {
            writeStandardError("pushwoosh-agentd: \(error)\n\(DaemonCommandLine.usage)\n")
            return 2
        }
        switch command {
        case .help:
            print(DaemonCommandLine.usage)
            return 0
        case .version:
            print("pushwoosh-agentd \(StatusReport.version)")
            return 0
        case .listKeys:
            print(AgentConfiguration.keyList, terminator: "")
            return 0
        case .checkConfig(let options, let json):
            return checkConfiguration(options, json: json, environment: environment)
        case .doctor(let options, let json):
            let configuration: AgentConfiguration
            do {
                configuration = try options.loadConfiguration(environment: environment)
            } catch {
                writeStandardError("pushwoosh-agentd --doctor: \(Visible.escape("\(error)"))\n")
                return 1
            }
            let report = Doctor(configuration: configuration, environment: environment).run()
            let token = configuration.server.apiToken
            print(json ? report.json(redacting: token) : report.text(redacting: token), terminator: "")
            return report.usable ? 0 : 1
        case .run(let options):
            do {
                let daemon = try Daemon(options: options, environment: environment, log: log)
                return daemon.run()
            } catch {
                log(.error, "cannot start", ["error": error])
                return 1
            }
        }
    }

    /// `--check-config [--json]`: the configuration read as a start reads it (the lab checks a
    /// device's configuration so before it starts one, docs/lab.md).
    static func checkConfiguration(_ options: DaemonOptions, json: Bool, environment: [String: String]) -> Int32 {
        do {
            _ = try options.loadConfiguration(environment: environment)
            print(json ? JSONWriter.string(.object(["ok": true, "file": .string(options.configFile)])) : "\(options.configFile): ok")
            return 0
        } catch {
            if json {
                var o: [String: JSONValue] = ["ok": false, "file": .string(error.file), "message": .string(error.message)]
                o["line"] = error.line.map { .number(Double($0)) } ?? .null
                o["key"] = error.key.map(JSONValue.string) ?? .null
                print(JSONWriter.string(.object(o)))
            } else {
                writeStandardError("pushwoosh-agentd --check-config: \(Visible.escape("\(error)"))\n")
            }
            return 1
        }
    }
}
