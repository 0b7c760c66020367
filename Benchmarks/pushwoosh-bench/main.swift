import Foundation

// Keep top-level code free of closures (PITFALLS: closures in main.swift run on other
// threads crash); everything lives in BenchMain.
exit(BenchMain.run(Array(CommandLine.arguments.dropFirst())))
