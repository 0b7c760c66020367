import AgentControl
import Foundation

exit(ControlTool.run(arguments: Array(CommandLine.arguments.dropFirst()),
                     environment: ProcessInfo.processInfo.environment,
                     output: StandardOutput()))
