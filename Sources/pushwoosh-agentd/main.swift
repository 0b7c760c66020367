import AgentDaemon
import Foundation

exit(DaemonMain.run(arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment))
