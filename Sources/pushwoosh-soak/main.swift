import AgentCore
import Foundation
import Soak

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.contains("--version") {
    print(PackageVersion.line("pushwoosh-soak"))
    exit(0)
}
if arguments.contains("--help") || arguments.contains("-h") {
    print(SoakOptions.usage)
    exit(0)
}
let options: SoakOptions
do {
    options = try SoakOptions.parse(arguments)
} catch {
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    // A refused run still tells CI why, in the JUnit file it was asked for.
    if let file = JUnitReport.writeUsageRefusal(arguments: arguments, error: error, timestamp: Date().formatted(.iso8601)) {
        FileHandle.standardError.write(Data("pushwoosh-soak: REFUSED (exit 2); wrote \(file) (JUnit)\n".utf8))
    }
    exit(error.exitCode)
}
exit(SoakRunner(options: options).run())
