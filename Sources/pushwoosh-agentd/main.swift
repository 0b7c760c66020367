import AgentDaemon
import FoundationEssentials
import Glibc

exit(DaemonMain.run(arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment))
