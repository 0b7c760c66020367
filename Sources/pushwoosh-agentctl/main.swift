import AgentControl
import Foundation

// A reader that went away is EPIPE on the next write, which `StandardOutput` ends quietly
// (exit 0), whoever started us and with what signal dispositions.
signal(SIGPIPE, SIG_IGN)
exit(ControlTool.run(arguments: Array(CommandLine.arguments.dropFirst()),
                     environment: ProcessInfo.processInfo.environment,
                     output: StandardOutput()))
