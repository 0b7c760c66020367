import Foundation
import Soak

let options: SoakOptions
do {
    options = try SoakOptions.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    exit(error.description.hasPrefix("usage:") ? 0 : 2)
}
exit(SoakRunner(options: options).run())
